// Entry points of the row kernels (softmax, its backward, cross-entropy) over
// the rows stacked across the batch, row < p.total_rows:
// - main_group: one ROW_WG-wide workgroup per row, strided passes joined by
//   tree reductions in workgroup memory (wg_reduce); the kernel defines
//   `fn row_by_group(row: u32, t: u32)`.
// - main_rowwise: one invocation per row, ROW_WG rows per workgroup, no
//   workgroup memory or barriers (the variant for software adapters, where
//   barriers are fiber switches); the kernel defines `fn row_by_invocation(row: u32)`.

var<workgroup> red: array<f32, ROW_WG>;

@compute @workgroup_size(ROW_WG, 1, 1)
fn main_group(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = group_index(wid, nwg);
    if (row < p.total_rows) {
        row_by_group(row, t);
    }
}

@compute @workgroup_size(ROW_WG, 1, 1)
fn main_rowwise(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let row = group_index(wid, nwg) * ROW_WG + t;
    if (row < p.total_rows) {
        row_by_invocation(row);
    }
}

// Maximum (take_max) or sum of v over the workgroup, by a tree reduction in
// `red`; every invocation gets the result. Called in uniform control flow.
fn wg_reduce(t: u32, v: f32, take_max: bool) -> f32 {
    red[t] = v;
    workgroupBarrier();
    for (var s = ROW_WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            if (take_max) {
                red[t] = max(red[t], red[t + s]);
            } else {
                red[t] += red[t + s];
            }
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}
