// Embedding gather with positional rows: H[r, c] = E[id_r, c] + P[r % T, c]
// for the rows r of a B×T batch (ids stored as f32 integers). One invocation
// per output element (p.len = B * T * d). An id outside the table gives a
// zero embedding row (callers check ids on the host).

fn element(i: u32) {
    let r = i / p.d;
    let c = i % p.d;
    let v = u32(ids[r]);
    var e = 0.0;
    if (v < p.vocab) {
        e = emb[v * p.d + c];
    }
    out[i] = e + pos[(r % p.t) * p.d + c];
}
