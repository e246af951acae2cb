// Embedding gather with positional rows: H[r, c] = E[id_r, c] + P[r % T, c]
// for the rows r of a B×T batch (ids stored as f32 integers). One invocation
// per output element. An id outside the table gives a zero embedding row
// (callers check ids on the host).

struct Params {
    total: u32, // B * T * d
    d: u32,
    t: u32,
    vocab: u32,
}

@group(0) @binding(0) var<storage, read> emb: array<f32>;
@group(0) @binding(1) var<storage, read> pos: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let i = (wid.y * nwg.x + wid.x) * 256u + t;
    if (i >= p.total) {
        return;
    }
    let r = i / p.d;
    let c = i % p.d;
    let v = u32(ids[r]);
    var e = 0.0;
    if (v < p.vocab) {
        e = emb[v * p.d + c];
    }
    out[i] = e + pos[(r % p.t) * p.d + c];
}
