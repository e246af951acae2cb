// y = a * x + b * y elementwise; with b == 0 the old y is not read.

struct Params {
    len: u32,
    a: f32,
    b: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

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
    var v = p.a * x[i];
    if (p.b != 0.0) {
        v += p.b * y[i];
    }
    y[i] = v;
}
