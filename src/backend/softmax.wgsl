// Row softmax Y = softmax(scale * X) with an optional causal mask (key j
// visible to query i iff j <= i, i = row inside its matrix; with causal = 2
// key 0 is also hidden from every query i >= 1); masked entries are written
// as 0. One 64-wide workgroup per row: a strided pass for the
// row maximum, one for the sum of exponentials, one to normalise, each
// followed by a tree reduction in workgroup memory.

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
    for (var j = lo + t; j < vis; j += WG) {
        mx = max(mx, p.scale * x[base + j]);
    }
    red[t] = mx;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] = max(red[t], red[t + s]);
        }
        workgroupBarrier();
    }
    mx = red[0];
    workgroupBarrier();

    var sum = 0.0;
    for (var j = lo + t; j < vis; j += WG) {
        let e = exp(p.scale * x[base + j] - mx);
        y[base + j] = e;
        sum += e;
    }
    red[t] = sum;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / red[0];
    for (var j = t; j < p.cols; j += WG) {
        if (j >= lo && j < vis) {
            y[base + j] *= inv;
        } else {
            y[base + j] = 0.0;
        }
    }
}
