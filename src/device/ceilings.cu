// Kernels that measure the device's ceilings: streaming copy bandwidth and FMA rate.

// 16-byte loads and stores, four in flight per thread, grid-stride; the caller counts
// 2*bytes (read + write).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_ceiling_copy)
extern "C" __global__ void ceiling_copy(const double2* __restrict__ src,
                                        double2* __restrict__ dst, u64 n) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const double2 a = src[i], b = src[i + stride], c = src[i + 2 * stride],
                      d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}
#endif

// 8 independent FMA chains per thread, `iters` rounds; the result is stored only if it
// equals an impossible value so the compiler cannot drop the work.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_ceiling_fma)
extern "C" __global__ void ceiling_fma(real* out, real a, real b, int iters) {
    real x0 = threadIdx.x, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3;
    real x4 = x0 + 4, x5 = x0 + 5, x6 = x0 + 6, x7 = x0 + 7;
    for (int k = 0; k < iters; ++k) {
#pragma unroll
        for (int u = 0; u < 16; ++u) {
            x0 = fma(x0, a, b); x1 = fma(x1, a, b); x2 = fma(x2, a, b); x3 = fma(x3, a, b);
            x4 = fma(x4, a, b); x5 = fma(x5, a, b); x6 = fma(x6, a, b); x7 = fma(x7, a, b);
        }
    }
    const real s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
    if (s == (real)-1.2345) out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
#endif
