// Batched C_b = alpha * op(A_b) * op(B_b) + beta * C_b, f32, row-major, in
// two implementations with the same parameters and bindings. Out-of-range
// elements load as 0, so any m, n, k works (no padding of the operands); a
// batch stride of 0 broadcasts one matrix over the batch; batch b is
// workgroup z plus p.batch_offset (the host splits batches beyond the
// z-dimension limit into several dispatches).
//
// main_tiled: a 16×16 workgroup computes a 64×64 tile of C; each invocation
// holds a 4×4 block of accumulators in registers (rows ty + 16 i, columns
// tx + 16 j, i, j < 4). The K dimension is walked in slices of 16: each slice
// of op(A) (64×16) and op(B) (16×64) is staged in workgroup memory, 4
// elements per invocation, with the fastest-varying index following the
// stored layout so global reads are contiguous whatever the transposes.
//
// main_direct: without workgroup memory, each invocation of an 8×8
// workgroup computes a 4×4 block of C (rows r0 + i, columns c0 + j), reading
// op(A) and op(B) straight from the storage buffers. On software rasterisers
// (llvmpipe), where the CPU caches do the tiling and workgroup barriers are
// costly, this beats main_tiled; on real GPUs that one is the choice.
//
// Accumulator row i is one vec4 with static indices only, so the block stays
// in registers (dynamic indexing of a private array spills to memory on
// SIMD-per-lane drivers such as llvmpipe).

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> tile_a: array<f32, 1024>; // [kk * TM + r]
var<workgroup> tile_b: array<f32, 1024>; // [kk * TN + col]

@compute @workgroup_size(16, 16, 1)
fn main_tiled(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let bz = wid.z + p.batch_offset;
    let a_base = bz * p.stride_a;
    let b_base = bz * p.stride_b;
    let c_base = bz * p.stride_c;
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        for (var l = 0u; l < 4u; l++) {
            // Element (r, kk) of the op(A) slice and (kb, col) of the op(B)
            // slice, as (outer, k) pairs.
            let e = li + l * 256u;
            let ea = slice_element(e, p.trans_a == 0u);
            let eb = slice_element(e, p.trans_b != 0u);
            var va = 0.0;
            if (k0 + ea.y < p.k) {
                va = load_a_or_0(a_base, row0 + ea.x, k0 + ea.y);
            }
            tile_a[ea.y * TM + ea.x] = va;
            var vb = 0.0;
            if (k0 + eb.y < p.k) {
                vb = load_b_or_0(b_base, k0 + eb.y, col0 + eb.x);
            }
            tile_b[eb.y * TN + eb.x] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk++) {
            let oa = kk * TM + lid.y;
            let ob = kk * TN + lid.x;
            let bv = vec4<f32>(tile_b[ob], tile_b[ob + 16u], tile_b[ob + 32u], tile_b[ob + 48u]);
            acc0 = fma(vec4<f32>(tile_a[oa]), bv, acc0);
            acc1 = fma(vec4<f32>(tile_a[oa + 16u]), bv, acc1);
            acc2 = fma(vec4<f32>(tile_a[oa + 32u]), bv, acc2);
            acc3 = fma(vec4<f32>(tile_a[oa + 48u]), bv, acc3);
        }
        workgroupBarrier();
    }

    store4(c_base, row0 + lid.y, col0 + lid.x, 16u, acc0);
    store4(c_base, row0 + lid.y + 16u, col0 + lid.x, 16u, acc1);
    store4(c_base, row0 + lid.y + 32u, col0 + lid.x, 16u, acc2);
    store4(c_base, row0 + lid.y + 48u, col0 + lid.x, 16u, acc3);
}

@compute @workgroup_size(8, 8, 1)
fn main_direct(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let bz = wid.z + p.batch_offset;
    let a_base = bz * p.stride_a;
    let b_base = bz * p.stride_b;
    let r0 = gid.y * 4u;
    let c0 = gid.x * 4u;
    if (r0 >= p.m || c0 >= p.n) {
        return;
    }
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var l = 0u; l < p.k; l++) {
        let bv = vec4<f32>(
            load_b_or_0(b_base, l, c0),
            load_b_or_0(b_base, l, c0 + 1u),
            load_b_or_0(b_base, l, c0 + 2u),
            load_b_or_0(b_base, l, c0 + 3u),
        );
        acc0 = fma(vec4<f32>(load_a_or_0(a_base, r0, l)), bv, acc0);
        acc1 = fma(vec4<f32>(load_a_or_0(a_base, r0 + 1u, l)), bv, acc1);
        acc2 = fma(vec4<f32>(load_a_or_0(a_base, r0 + 2u, l)), bv, acc2);
        acc3 = fma(vec4<f32>(load_a_or_0(a_base, r0 + 3u, l)), bv, acc3);
    }
    let c_base = bz * p.stride_c;
    store4(c_base, r0, c0, 1u, acc0);
    store4(c_base, r0 + 1u, c0, 1u, acc1);
    store4(c_base, r0 + 2u, c0, 1u, acc2);
    store4(c_base, r0 + 3u, c0, 1u, acc3);
}

// The (outer, k) position of element e of a staged 64×TK slice, e < 1024:
// k fastest when the slice is stored with k contiguous (op(A) = A, op(B) = Bᵀ),
// else the outer index fastest, so consecutive invocations read consecutive
// addresses. TM = TN = 64 is the outer size of both slices.
fn slice_element(e: u32, k_fastest: bool) -> vec2<u32> {
    if (k_fastest) {
        return vec2<u32>(e / TK, e % TK);
    }
    return vec2<u32>(e % TM, e / TM);
}

// op(A)[r, l] (in range).
fn load_a(base: u32, r: u32, l: u32) -> f32 {
    if (p.trans_a == 0u) {
        return a[base + r * p.k + l];
    }
    return a[base + l * p.m + r];
}

// op(B)[l, col] (in range).
fn load_b(base: u32, l: u32, col: u32) -> f32 {
    if (p.trans_b == 0u) {
        return b[base + l * p.n + col];
    }
    return b[base + col * p.k + l];
}

// op(A)[r, l], 0 for a row outside the matrix (callers ensure l < k).
fn load_a_or_0(base: u32, r: u32, l: u32) -> f32 {
    if (r >= p.m) {
        return 0.0;
    }
    return load_a(base, r, l);
}

// op(B)[l, col], 0 for a column outside the matrix.
fn load_b_or_0(base: u32, l: u32, col: u32) -> f32 {
    if (col >= p.n) {
        return 0.0;
    }
    return load_b(base, l, col);
}

// Writes C[r, col0 + step j] = alpha acc[j] (+ beta C[...]) for the in-range j.
fn store4(c_base: u32, r: u32, col0: u32, step: u32, acc: vec4<f32>) {
    if (r >= p.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let col = col0 + step * j;
        if (col < p.n) {
            let idx = c_base + r * p.n + col;
            var v = p.alpha * acc[j];
            if (p.beta != 0.0) {
                v += p.beta * c[idx];
            }
            c[idx] = v;
        }
    }
}
