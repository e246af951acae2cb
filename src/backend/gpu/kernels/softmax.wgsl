// Row softmax Y = softmax(scale * X) with an optional causal mask (key j
// visible to query i iff j <= i, i = row inside its matrix; with causal = 2
// key 0 is also hidden from every query i >= 1); masked entries are written
// as 0. Passes over the visible keys: maximum, exponentials and their sum,
// normalisation.

// Visible keys lo..hi (x, y) of a row.
fn visible(row: u32) -> vec2<u32> {
    var vis = p.cols;
    var lo = 0u;
    if (p.causal != 0u) {
        let i = row % p.rows;
        vis = min(i + 1u, p.cols);
        if (p.causal == 2u && i >= 1u) {
            lo = 1u;
        }
    }
    return vec2<u32>(lo, vis);
}

// One workgroup per row: strided passes, each joined by a reduction.
fn row_by_group(row: u32, t: u32) {
    let base = row * p.cols;
    let k = visible(row);
    var mx = -3.4e38;
    for (var j = k.x + t; j < k.y; j += ROW_WG) {
        mx = max(mx, p.scale * x[base + j]);
    }
    mx = wg_reduce(t, mx, true);
    var sum = 0.0;
    for (var j = k.x + t; j < k.y; j += ROW_WG) {
        let e = exp(p.scale * x[base + j] - mx);
        y[base + j] = e;
        sum += e;
    }
    let inv = 1.0 / wg_reduce(t, sum, false);
    for (var j = t; j < p.cols; j += ROW_WG) {
        if (j >= k.x && j < k.y) {
            y[base + j] *= inv;
        } else {
            y[base + j] = 0.0;
        }
    }
}

// One invocation per row: sequential passes.
fn row_by_invocation(row: u32) {
    let base = row * p.cols;
    let k = visible(row);
    var mx = -3.4e38;
    for (var j = k.x; j < k.y; j++) {
        mx = max(mx, p.scale * x[base + j]);
    }
    var sum = 0.0;
    for (var j = k.x; j < k.y; j++) {
        let e = exp(p.scale * x[base + j] - mx);
        y[base + j] = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for (var j = 0u; j < p.cols; j++) {
        if (j >= k.x && j < k.y) {
            y[base + j] *= inv;
        } else {
            y[base + j] = 0.0;
        }
    }
}
