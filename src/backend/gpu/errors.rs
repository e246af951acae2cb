//! Error scopes and device health: how wgpu failures become
//! [`BackendError`] values instead of panics or aborts.
//!
//! Work that may fail (allocations, bind groups on a cache miss, shader
//! compilation, each submit) runs inside [`ErrorScopes`]; a lost device and
//! errors outside every scope are recorded in [`Health`] by the device
//! callbacks and reported by the next call.

use std::sync::{Arc, Mutex};

use crate::backend::{BackendError, Result};

/// Out-of-memory, validation and internal error scopes around a piece of work.
pub(super) struct ErrorScopes {
    oom: wgpu::ErrorScopeGuard,
    validation: wgpu::ErrorScopeGuard,
    internal: wgpu::ErrorScopeGuard,
}

impl ErrorScopes {
    pub(super) fn push(device: &wgpu::Device) -> Self {
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
        Self {
            oom,
            validation,
            internal,
        }
    }

    /// Pops in reverse order; the first error found becomes the result.
    pub(super) fn pop(self, what: &str) -> Result<()> {
        let internal = pollster::block_on(self.internal.pop());
        let validation = pollster::block_on(self.validation.pop());
        let oom = pollster::block_on(self.oom.pop());
        if oom.is_some() {
            return Err(BackendError::OutOfMemory(what.to_string()));
        }
        if let Some(e) = validation.or(internal) {
            return Err(BackendError::Gpu {
                what: what.to_string(),
                msg: e.to_string(),
            });
        }
        Ok(())
    }
}

/// Why the device is unusable, once it is: set by the device-lost and
/// uncaptured-error callbacks, read before every call.
#[derive(Clone, Default)]
pub(super) struct Health(Arc<Mutex<Option<String>>>);

impl Health {
    /// Records `msg`; `overwrite` replaces an earlier message (device loss is
    /// the final word), otherwise the first message is kept.
    pub(super) fn record(&self, msg: String, overwrite: bool) {
        if let Ok(mut g) = self.0.lock()
            && (overwrite || g.is_none())
        {
            *g = Some(msg);
        }
    }

    /// [`BackendError::DeviceLost`] once anything was recorded.
    pub(super) fn check(&self) -> Result<()> {
        match self.0.lock() {
            Ok(g) => match g.as_ref() {
                Some(msg) => Err(BackendError::DeviceLost(msg.clone())),
                None => Ok(()),
            },
            Err(_) => Err(BackendError::DeviceLost("device-lost flag poisoned".into())),
        }
    }
}
