// Weighted softmax cross-entropy per row r (classes = cols) against target
// y_r with weight c_r:
//   loss[r]       = c_r * (log sum_j exp(z_rj) - z_r,y_r)
//   dlogits[r, j] = c_r * (softmax(z_r)_j - [j == y_r])
// Rows with c_r = 0 are written as exactly 0.

// One workgroup per row: strided passes for the maximum and the sum of
// exponentials, each joined by a reduction. c_r is read from storage (not
// uniform), so every row runs the reductions and c_r only selects the writes.
fn row_by_group(row: u32, t: u32) {
    let base = row * p.cols;
    var mx = -3.4e38;
    for (var j = t; j < p.cols; j += ROW_WG) {
        mx = max(mx, z[base + j]);
    }
    mx = wg_reduce(t, mx, true);
    var sum = 0.0;
    for (var j = t; j < p.cols; j += ROW_WG) {
        sum += exp(z[base + j] - mx);
    }
    sum = wg_reduce(t, sum, false);
    let c = coef[row];
    let y = u32(targets[row]);
    for (var j = t; j < p.cols; j += ROW_WG) {
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

// One invocation per row (the target of a row with c_r = 0 is not read).
fn row_by_invocation(row: u32) {
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
