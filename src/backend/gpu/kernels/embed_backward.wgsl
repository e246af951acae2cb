// Backward of the embedding gather, written as a gather (no float atomics):
// dE[v, c] = sum over rows r with id_r = v of dH[r, c];
// dP[i, c] = sum over sequences b of dH[b*T + i, c] for i < T, 0 for i >= T.
// One invocation per element of dE (indices below vocab*d) and of dP (the
// rest; p.len = (vocab + pos_rows) * d). Sums run in row order, as on the CPU.

fn element(i: u32) {
    let n_emb = p.vocab * p.d;
    var s = 0.0;
    if (i < n_emb) {
        let v = i / p.d;
        let c = i % p.d;
        for (var r = 0u; r < p.rows; r++) {
            if (u32(ids[r]) == v) {
                s += dh[r * p.d + c];
            }
        }
        d_emb[i] = s;
        return;
    }
    let j = i - n_emb;
    let row = j / p.d;
    let c = j % p.d;
    if (row < p.t) {
        for (var r = row; r < p.rows; r += p.t) {
            s += dh[r * p.d + c];
        }
    }
    d_pos[j] = s;
}
