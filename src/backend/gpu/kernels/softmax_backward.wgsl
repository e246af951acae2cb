// Backward of the row softmax given its output Y:
// dX = scale * Y ⊙ (dY − rowsum(Y ⊙ dY)). Masked entries have Y = 0, so
// their gradient is 0 without needing the mask.

// One workgroup per row: a strided dot product joined by a reduction.
fn row_by_group(row: u32, t: u32) {
    let base = row * p.cols;
    var dot = 0.0;
    for (var j = t; j < p.cols; j += ROW_WG) {
        dot += y[base + j] * dy[base + j];
    }
    dot = wg_reduce(t, dot, false);
    for (var j = t; j < p.cols; j += ROW_WG) {
        dx[base + j] = p.scale * y[base + j] * (dy[base + j] - dot);
    }
}

// One invocation per row.
fn row_by_invocation(row: u32) {
    let base = row * p.cols;
    var dot = 0.0;
    for (var j = 0u; j < p.cols; j++) {
        dot += y[base + j] * dy[base + j];
    }
    for (var j = 0u; j < p.cols; j++) {
        dx[base + j] = p.scale * y[base + j] * (dy[base + j] - dot);
    }
}
