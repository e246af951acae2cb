//! Routing of host-side f32 products (faer matrices) to a GPU backend, per
//! thread, so code written against faer (the training loop) runs its
//! products on the device without changing its types.
//!
//! [`install`] puts a [`Wgpu`] on the current thread until the returned guard
//! drops; while it is installed, [`matmul_f32`] computes
//! $C \leftarrow \mathrm{op}(A)\,\mathrm{op}(B)\ (+\,C)$ on the device. Device
//! buffers come from a per-thread pool keyed by shape, so a training loop that
//! repeats the same shapes allocates them once and reuses them every step.
//! Each routed product uploads its operands and reads its result back: the
//! training code keeps its weights in faer matrices, so this is the one
//! transfer per product that the host-side loop truly needs.
//!
//! A device error does not panic: the product falls back to the CPU, the
//! first error is kept, and [`take_error`] hands it to the caller (the
//! training loop turns it into a typed error after the step).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use faer::{MatMut, MatRef};

use super::{Backend, BackendError, GpuTensor, Op, Shape, Wgpu};

struct Routed {
    gpu: Arc<Wgpu>,
    pool: HashMap<Shape, Vec<GpuTensor>>,
    error: Option<BackendError>,
    staging: Vec<f32>,
}

thread_local! {
    static ROUTE: RefCell<Option<Routed>> = const { RefCell::new(None) };
}

/// Removes the routing when dropped (restoring whatever was there before).
pub struct RouteGuard {
    prev: Option<Routed>,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        let prev = self.prev.take();
        ROUTE.with(|r| *r.borrow_mut() = prev);
    }
}

/// Routes this thread's f32 products to `gpu` until the guard drops.
pub fn install(gpu: Arc<Wgpu>) -> RouteGuard {
    let new = Routed {
        gpu,
        pool: HashMap::new(),
        error: None,
        staging: Vec::new(),
    };
    let prev = ROUTE.with(|r| r.borrow_mut().replace(new));
    RouteGuard { prev }
}

/// True when a GPU is routed on this thread.
pub fn active() -> bool {
    ROUTE.with(|r| r.borrow().is_some())
}

/// The GPU routed on this thread, if any: code that can keep its whole loop
/// on the device (`train::device`) asks for it instead of routing products.
pub fn current() -> Option<Arc<Wgpu>> {
    ROUTE.with(|r| r.borrow().as_ref().map(|s| s.gpu.clone()))
}

/// The first device error since the last call, if any.
pub fn take_error() -> Option<BackendError> {
    ROUTE.with(|r| r.borrow_mut().as_mut().and_then(|s| s.error.take()))
}

impl Routed {
    fn tensor(&mut self, shape: Shape) -> Result<GpuTensor, BackendError> {
        match self.pool.get_mut(&shape).and_then(Vec::pop) {
            Some(t) => Ok(t),
            None => self.gpu.zeros(shape),
        }
    }

    fn give_back(&mut self, t: GpuTensor) {
        self.pool.entry(t.shape()).or_default().push(t);
    }

    fn upload(&mut self, m: MatRef<'_, f32>) -> Result<GpuTensor, BackendError> {
        let shape = Shape::mat(m.nrows(), m.ncols());
        let mut t = self.tensor(shape)?;
        self.staging.clear();
        self.staging.reserve(shape.len());
        for i in 0..m.nrows() {
            for j in 0..m.ncols() {
                self.staging.push(m[(i, j)]);
            }
        }
        let r = self.gpu.write(&mut t, &self.staging);
        match r {
            Ok(()) => Ok(t),
            Err(e) => {
                self.give_back(t);
                Err(e)
            }
        }
    }

    fn run(
        &mut self,
        mut dst: MatMut<'_, f32>,
        accumulate: bool,
        a: MatRef<'_, f32>,
        op_a: Op,
        b: MatRef<'_, f32>,
        op_b: Op,
    ) -> Result<(), BackendError> {
        let ta = self.upload(a)?;
        let tb = self.upload(b)?;
        let tc = if accumulate {
            self.upload(dst.as_ref())
        } else {
            self.tensor(Shape::mat(dst.nrows(), dst.ncols()))
        };
        let mut tc = match tc {
            Ok(t) => t,
            Err(e) => {
                self.give_back(ta);
                self.give_back(tb);
                return Err(e);
            }
        };
        let beta = if accumulate { 1.0 } else { 0.0 };
        let r = self
            .gpu
            .matmul(1.0, &ta, op_a, &tb, op_b, beta, &mut tc)
            .and_then(|()| self.gpu.read(&tc));
        self.give_back(ta);
        self.give_back(tb);
        self.give_back(tc);
        let out = r?;
        let n = dst.ncols();
        for i in 0..dst.nrows() {
            for j in 0..n {
                dst[(i, j)] = out[i * n + j];
            }
        }
        Ok(())
    }
}

/// Computes $C \leftarrow \mathrm{op}(A)\,\mathrm{op}(B)$ (or `+=` when
/// `accumulate`) on this thread's routed GPU. Returns `false` when no GPU is
/// routed or a device error occurred (the error is kept for [`take_error`]);
/// the caller then computes the product on the CPU itself.
pub fn matmul_f32(
    dst: MatMut<'_, f32>,
    accumulate: bool,
    a: MatRef<'_, f32>,
    trans_a: bool,
    b: MatRef<'_, f32>,
    trans_b: bool,
) -> bool {
    ROUTE.with(|r| {
        let mut g = r.borrow_mut();
        let Some(s) = g.as_mut() else { return false };
        if s.error.is_some() {
            return false;
        }
        // faer views may be transposed or strided: the upload copies them
        // element by element into row-major order, so `op` is applied here.
        let op = |t: bool| if t { Op::T } else { Op::N };
        match s.run(dst, accumulate, a, op(trans_a), b, op(trans_b)) {
            Ok(()) => true,
            Err(e) => {
                s.error = Some(e);
                false
            }
        }
    })
}
