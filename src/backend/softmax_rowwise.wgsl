// Row softmax, same contract, parameters and bindings as softmax.wgsl, with
// one invocation per row (64 rows per workgroup) and no workgroup memory or
// barriers: the variant for software adapters (llvmpipe), where barriers are
// fiber switches and short rows leave a 64-wide workgroup mostly idle.
// Sequential passes over the visible keys: maximum, exponentials and their
// sum, normalisation (masked entries written as 0).

struct Params {
    rows: u32,       // rows per matrix
    cols: u32,
    total_rows: u32, // batch * rows
    causal: u32,     // 0 none, 1 causal, 2 causal without key 0 for i >= 1
    scale: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

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
    var vis = p.cols;
    var lo = 0u;
    if (p.causal != 0u) {
        let i = row % p.rows;
        vis = min(i + 1u, p.cols);
        if (p.causal == 2u && i >= 1u) {
            lo = 1u;
        }
    }
    var mx = -3.4e38;
    for (var j = lo; j < vis; j++) {
        mx = max(mx, p.scale * x[base + j]);
    }
    var sum = 0.0;
    for (var j = lo; j < vis; j++) {
        let e = exp(p.scale * x[base + j] - mx);
        y[base + j] = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for (var j = 0u; j < p.cols; j++) {
        if (j >= lo && j < vis) {
            y[base + j] *= inv;
        } else {
            y[base + j] = 0.0;
        }
    }
}
