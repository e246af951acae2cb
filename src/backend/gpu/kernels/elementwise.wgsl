// Entry point of the elementwise kernels: one invocation per element
// i < p.len, ELEM_WG per workgroup. The kernel defines `fn element(i: u32)`.

@compute @workgroup_size(ELEM_WG, 1, 1)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) t: u32,
) {
    let i = group_index(wid, nwg) * ELEM_WG + t;
    if (i < p.len) {
        element(i);
    }
}
