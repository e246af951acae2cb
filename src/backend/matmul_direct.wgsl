// Batched C_b = alpha * op(A_b) * op(B_b) + beta * C_b, f32, row-major,
// without workgroup memory: each invocation computes a 4×4 block of C in
// registers (four vec4 rows), reading op(A) and op(B) straight from the
// storage buffers. On software rasterisers (llvmpipe), where the CPU caches
// do the tiling and workgroup barriers are costly, this beats the
// shared-memory kernel of matmul.wgsl; on real GPUs that one is the choice.
// Same parameters and bindings as matmul.wgsl.

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

// op(A)[r, l], 0 outside the matrix.
fn load_a(base: u32, r: u32, l: u32) -> f32 {
    if (r >= p.m) {
        return 0.0;
    }
    if (p.trans_a == 0u) {
        return a[base + r * p.k + l];
    }
    return a[base + l * p.m + r];
}

// op(B)[l, col], 0 outside the matrix.
fn load_b(base: u32, l: u32, col: u32) -> f32 {
    if (col >= p.n) {
        return 0.0;
    }
    if (p.trans_b == 0u) {
        return b[base + l * p.n + col];
    }
    return b[base + col * p.k + l];
}

fn store(base: u32, r: u32, col0: u32, acc: vec4<f32>) {
    if (r >= p.m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let col = col0 + j;
        if (col < p.n) {
            let idx = base + r * p.n + col;
            var v = p.alpha * acc[j];
            if (p.beta != 0.0) {
                v += p.beta * c[idx];
            }
            c[idx] = v;
        }
    }
}

@compute @workgroup_size(8, 8, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
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
            load_b(b_base, l, c0),
            load_b(b_base, l, c0 + 1u),
            load_b(b_base, l, c0 + 2u),
            load_b(b_base, l, c0 + 3u),
        );
        acc0 = fma(vec4<f32>(load_a(a_base, r0, l)), bv, acc0);
        acc1 = fma(vec4<f32>(load_a(a_base, r0 + 1u, l)), bv, acc1);
        acc2 = fma(vec4<f32>(load_a(a_base, r0 + 2u, l)), bv, acc2);
        acc3 = fma(vec4<f32>(load_a(a_base, r0 + 3u, l)), bv, acc3);
    }
    let c_base = bz * p.stride_c;
    store(c_base, r0, c0, acc0);
    store(c_base, r0 + 1u, c0, acc1);
    store(c_base, r0 + 2u, c0, acc2);
    store(c_base, r0 + 3u, c0, acc3);
}
