// Backward of ReLU at its input x: dx = dy where x > 0, else 0.

struct Params {
    len: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + t;
    if (i >= p.len) {
        return;
    }
    dx[i] = select(0.0, dy[i], x[i] > 0.0);
}
