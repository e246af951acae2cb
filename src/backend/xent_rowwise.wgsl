// Weighted softmax cross-entropy, same contract, parameters and bindings as
// xent.wgsl, with one invocation per row (64 rows per workgroup) and no
// barriers: the variant for software adapters.
//   loss[r]       = c_r * (log sum_j exp(z_rj) - z_r,y_r)
//   dlogits[r, j] = c_r * (softmax(z_r)_j - [j == y_r])
// Rows with c_r = 0 are written as exactly 0 (their target is not read).

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
    let c = coef[row];
    if (c == 0.0) {
        for (var j = 0u; j < p.cols; j++) {
            dz[base + j] = 0.0;
        }
        loss[row] = 0.0;
        return;
    }
    var mx = -3.4e38;
    for (var j = 0u; j < p.cols; j++) {
        mx = max(mx, z[base + j]);
    }
    var sum = 0.0;
    for (var j = 0u; j < p.cols; j++) {
        sum += exp(z[base + j] - mx);
    }
    let y = u32(targets[row]);
    let inv = 1.0 / sum;
    for (var j = 0u; j < p.cols; j++) {
        var g = exp(z[base + j] - mx) * inv;
        if (j == y) {
            g -= 1.0;
        }
        dz[base + j] = c * g;
    }
    var l = 0.0;
    if (y < p.cols) {
        l = c * (mx + log(sum) - z[base + y]);
    }
    loss[row] = l;
}
