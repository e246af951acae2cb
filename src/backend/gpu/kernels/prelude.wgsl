// Shared by every kernel module. The host has already emitted its workgroup
// sizes as constants (ELEM_WG, ROW_WG) above this; the parameter struct and
// the bindings follow it (see pipeline.rs).

// Flat index of a workgroup on the 2-D grid the host splits a large dispatch
// into (x up to the device's per-dimension limit, then y).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return wid.y * nwg.x + wid.x;
}
