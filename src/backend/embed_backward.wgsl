// Backward of the embedding gather, written as a gather (no float atomics):
// dE[v, c] = sum over rows r with id_r = v of dH[r, c];
// dP[i, c] = sum over sequences b of dH[b*T + i, c] for i < T, 0 for i >= T.
// One invocation per element of dE (indices below vocab*d) and of dP (the
// rest). Sums run in row order, as on the CPU.

struct Params {
    rows: u32,  // B * T
    d: u32,
    t: u32,
    vocab: u32,
    pos_rows: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read> dh: array<f32>;
@group(0) @binding(1) var<storage, read> ids: array<f32>;
@group(0) @binding(2) var<storage, read_write> d_emb: array<f32>;
@group(0) @binding(3) var<storage, read_write> d_pos: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + t;
    let n_emb = p.vocab * p.d;
    if (i < n_emb) {
        let v = i / p.d;
        let c = i % p.d;
        var s = 0.0;
        for (var r = 0u; r < p.rows; r++) {
            if (u32(ids[r]) == v) {
                s += dh[r * p.d + c];
            }
        }
        d_emb[i] = s;
        return;
    }
    let j = i - n_emb;
    if (j >= p.pos_rows * p.d) {
        return;
    }
    let row = j / p.d;
    let c = j % p.d;
    var s = 0.0;
    if (row < p.t) {
        for (var r = row; r < p.rows; r += p.t) {
            s += dh[r * p.d + c];
        }
    }
    d_pos[j] = s;
}
