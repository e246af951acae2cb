// Backward of the row softmax, same contract, parameters and bindings as
// softmax_backward.wgsl, with one invocation per row (64 rows per
// workgroup) and no barriers: the variant for software adapters.
// dX = scale * Y ⊙ (dY − rowsum(Y ⊙ dY)).

struct Params {
    cols: u32,
    total_rows: u32,
    scale: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> y: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dx: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = (wid.y * nwg.x + wid.x) * 64u + t;
    if (row >= p.total_rows) {
        return;
    }
    let base = row * p.cols;
    var dot = 0.0;
    for (var j = 0u; j < p.cols; j++) {
        dot += y[base + j] * dy[base + j];
    }
    for (var j = 0u; j < p.cols; j++) {
        dx[base + j] = p.scale * y[base + j] * (dy[base + j] - dot);
    }
}
