// Batched C_b = alpha * op(A_b) * op(B_b) + beta * C_b, f32, row-major.
//
// Tiling: a 16×16 workgroup computes a 64×64 tile of C; each invocation holds
// a 4×4 block of accumulators in registers (rows ty + 16 i, columns tx + 16 j,
// i, j < 4). The K dimension is walked in slices of 16: each slice of op(A)
// (64×16) and op(B) (16×64) is staged in workgroup memory, 4 elements per
// invocation, with the fastest-varying index following the stored layout so
// global reads are contiguous whatever the transposes. Out-of-range elements
// load as 0, so any m, n, k works (no padding of the operands).
// A batch stride of 0 broadcasts one matrix over the batch.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    trans_a: u32,
    trans_b: u32,
    stride_a: u32,
    stride_b: u32,
    stride_c: u32,
    batch_offset: u32,
    alpha: f32,
    beta: f32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> tile_a: array<f32, 1024>; // [kk * TM + r]
var<workgroup> tile_b: array<f32, 1024>; // [kk * TN + col]

@compute @workgroup_size(16, 16, 1)
fn main(
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

    // Accumulator row i holds columns tx + 16 j, j = 0..3, as one vec4:
    // static indices only, so the block stays in registers (dynamic indexing
    // of a private array spills to memory on SIMD-per-lane drivers such as
    // llvmpipe).
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 += TK) {
        for (var l = 0u; l < 4u; l++) {
            let e = li + l * 256u;
            // Element (r, kk) of the op(A) slice.
            var r: u32;
            var kk: u32;
            if (p.trans_a == 0u) {
                kk = e % TK;
                r = e / TK;
            } else {
                r = e % TM;
                kk = e / TM;
            }
            let gr = row0 + r;
            let gk = k0 + kk;
            var va = 0.0;
            if (gr < p.m && gk < p.k) {
                if (p.trans_a == 0u) {
                    va = a[a_base + gr * p.k + gk];
                } else {
                    va = a[a_base + gk * p.m + gr];
                }
            }
            tile_a[kk * TM + r] = va;
            // Element (kb, col) of the op(B) slice.
            var col: u32;
            var kb: u32;
            if (p.trans_b == 0u) {
                col = e % TN;
                kb = e / TN;
            } else {
                kb = e % TK;
                col = e / TK;
            }
            let gc = col0 + col;
            let gkb = k0 + kb;
            var vb = 0.0;
            if (gc < p.n && gkb < p.k) {
                if (p.trans_b == 0u) {
                    vb = b[b_base + gkb * p.n + gc];
                } else {
                    vb = b[b_base + gc * p.k + gkb];
                }
            }
            tile_b[kb * TN + col] = vb;
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

    store_row(c_base, row0 + lid.y, col0 + lid.x, acc0);
    store_row(c_base, row0 + lid.y + 16u, col0 + lid.x, acc1);
    store_row(c_base, row0 + lid.y + 32u, col0 + lid.x, acc2);
    store_row(c_base, row0 + lid.y + 48u, col0 + lid.x, acc3);
}

// Writes C[gr, gc + 16 j] = alpha acc[j] (+ beta C[...]) for the in-range j.
fn store_row(c_base: u32, gr: u32, gc: u32, acc: vec4<f32>) {
    if (gr >= p.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let col = gc + 16u * j;
        if (col < p.n) {
            let idx = c_base + gr * p.n + col;
            var v = p.alpha * acc[j];
            if (p.beta != 0.0) {
                v += p.beta * c[idx];
            }
            c[idx] = v;
        }
    }
}
