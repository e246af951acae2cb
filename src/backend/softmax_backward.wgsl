// Backward of the row softmax given its output Y:
// dX = scale * Y ⊙ (dY − rowsum(Y ⊙ dY)). Masked entries have Y = 0, so
// their gradient is 0 without needing the mask. One 64-wide workgroup per row.

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

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = wid.y * nwg.x + wid.x;
    if (row >= p.total_rows) {
        return;
    }
    let base = row * p.cols;
    var dot = 0.0;
    for (var j = t; j < p.cols; j += WG) {
        dot += y[base + j] * dy[base + j];
    }
    red[t] = dot;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    dot = red[0];
    for (var j = t; j < p.cols; j += WG) {
        dx[base + j] = p.scale * y[base + j] * (dy[base + j] - dot);
    }
}
