// Weighted softmax cross-entropy per row r (classes = cols) against target
// y_r with weight c_r:
//   loss[r]       = c_r * (log sum_j exp(z_rj) - z_r,y_r)
//   dlogits[r, j] = c_r * (softmax(z_r)_j - [j == y_r])
// Rows with c_r = 0 are written as exactly 0. One 64-wide workgroup per row:
// strided passes for the maximum and the sum of exponentials, each followed
// by a tree reduction in workgroup memory. c_r is read from storage (not
// uniform), so every row runs the reductions and c_r only selects the writes.

struct Params {
    cols: u32,
    total_rows: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<storage, read> z: array<f32>;
@group(0) @binding(1) var<storage, read> targets: array<f32>;
@group(0) @binding(2) var<storage, read> coef: array<f32>;
@group(0) @binding(3) var<storage, read_write> dz: array<f32>;
@group(0) @binding(4) var<storage, read_write> loss: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

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

    var mx = -3.4e38;
    for (var j = t; j < p.cols; j += WG) {
        mx = max(mx, z[base + j]);
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
    for (var j = t; j < p.cols; j += WG) {
        sum += exp(z[base + j] - mx);
    }
    red[t] = sum;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            red[t] += red[t + s];
        }
        workgroupBarrier();
    }
    sum = red[0];

    let c = coef[row];
    let y = u32(targets[row]);
    for (var j = t; j < p.cols; j += WG) {
        var g = exp(z[base + j] - mx) / sum;
        if (j == y) {
            g -= 1.0;
        }
        dz[base + j] = select(c * g, 0.0, c == 0.0);
    }
    if (t == 0u) {
        var l = 0.0;
        if (c != 0.0 && y < p.cols) {
            l = c * (mx + log(sum) - z[base + y]);
        }
        loss[row] = l;
    }
}
