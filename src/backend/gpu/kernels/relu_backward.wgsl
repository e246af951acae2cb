// Backward of ReLU at its input x: dx = dy where x > 0, else 0.

fn element(i: u32) {
    dx[i] = select(0.0, dy[i], x[i] > 0.0);
}
