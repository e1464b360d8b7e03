// Direct N-body: f32 forces (seed 001's kernel, several i-particles per thread), the f64
// leapfrog around them, an f64 potential for the diagnostics, and the CUDA-sample kernel
// the bench compares with. Compiled with -Dreal=double (the integration's type) and:
//   NB_THREADS     threads per block = j-particles per shared-memory tile
//   NB_IPT         i-particles per thread (held in registers; one shared load of a
//                  j-particle serves NB_IPT interactions)
//   NB_ACCURATE    sum the f32 terms in f64
//   NB_GUARD       inv = 0 at zero separation (needed when eps = 0: the self pair)
//   NB_EQUAL_MASS  every mass is equal: the kernel sums d/r^3 and the kick multiplies
//                  by G*m once (one FMUL less per interaction)

#ifndef NB_THREADS
#define NB_THREADS 128
#endif
#ifndef NB_IPT
#define NB_IPT 8
#endif
#ifndef NB_ACCURATE
#define NB_ACCURATE 0
#endif
#ifndef NB_GUARD
#define NB_GUARD 0
#endif
#ifndef NB_EQUAL_MASS
#define NB_EQUAL_MASS 0
#endif
// Tuning: unroll of the j-loop, and the blocks per SM the register budget aims at.
#ifndef NB_UNROLL
#define NB_UNROLL 2
#endif
#ifndef NB_MINB
#define NB_MINB 3
#endif
#define NB_PRAGMA(x) _Pragma(#x)
#define NB_UNROLL_PRAGMA(n) NB_PRAGMA(unroll n)

// Padding particles sit at (NB_FAR, NB_FAR, NB_FAR) with zero mass: their separation
// from any real particle squares to +inf in f32, rsqrt(+inf) = +0, so they add exactly
// zero whether or not the kernel multiplies by the mass.
#define NB_FAR 1e30f

// x, m (f64, n particles) -> xm (f32 x y z m, n_pad entries).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_pack)
extern "C" __global__ void nbody_pack(const double* __restrict__ x, const double* __restrict__ m,
                                      float4* __restrict__ xm, int n, int n_pad) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pad; i += gridDim.x * blockDim.x) {
        xm[i] = i < n ? make_float4((float)x[3 * i], (float)x[3 * i + 1], (float)x[3 * i + 2],
                                    (float)m[i])
                      : make_float4(NB_FAR, NB_FAR, NB_FAR, 0.f);
    }
}
#endif

__device__ __forceinline__ float nb_rsqrt(float r2) {
    float inv;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(inv) : "f"(r2));
#if NB_GUARD
    inv = r2 > 0.f ? inv : 0.f;
#endif
    return inv;
}

// Block b holds the i-particles i_base + b*NB_THREADS*NB_IPT + k*NB_THREADS + threadIdx.x
// of xm (k < NB_IPT; a device's segment of n_i_pad) and sums over the j-tiles [t0, t1)
// of its split (blockIdx.y) of the range tile_first..tile_end (a j-segment). Per
// interaction: 3 FADD, 3 FFMA (r^2, a chain from eps^2), one MUFU rsqrt, 2-3 FMUL
// (m/r^3), 3 FFMA (accelerations); no branch. out[(split_base + split)*n_i_pad + i] =
// (ax, ay, az, 0):
// sum_j m_j d/r^3 (or sum_j d/r^3 with NB_EQUAL_MASS).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_forces)
extern "C" __global__ void __launch_bounds__(NB_THREADS, NB_MINB)
nbody_forces(const float4* __restrict__ xm, float4* __restrict__ out, int i_base, int n_i_pad,
             int tile_first, int tile_end, int tiles_per_split, int split_base, float eps2) {
    __shared__ float4 tile[NB_THREADS];
    const int mine = blockIdx.x * (NB_THREADS * NB_IPT) + threadIdx.x;
    const int first = i_base + mine;
    const int t0 = tile_first + blockIdx.y * tiles_per_split;
    const int t1 = min(t0 + tiles_per_split, tile_end);
    float px[NB_IPT], py[NB_IPT], pz[NB_IPT];
#if NB_ACCURATE
    double ax[NB_IPT], ay[NB_IPT], az[NB_IPT];
#else
    float ax[NB_IPT], ay[NB_IPT], az[NB_IPT];
#endif
#pragma unroll
    for (int k = 0; k < NB_IPT; ++k) {
        const float4 p = xm[first + k * NB_THREADS];
        px[k] = p.x; py[k] = p.y; pz[k] = p.z;
        ax[k] = 0; ay[k] = 0; az[k] = 0;
    }
    for (int t = t0; t < t1; ++t) {
        __syncthreads();
        tile[threadIdx.x] = xm[t * NB_THREADS + threadIdx.x];
        __syncthreads();
        NB_UNROLL_PRAGMA(NB_UNROLL)
        for (int j = 0; j < NB_THREADS; ++j) {
            const float4 o = tile[j];
#pragma unroll
            for (int k = 0; k < NB_IPT; ++k) {
                const float dx = o.x - px[k], dy = o.y - py[k], dz = o.z - pz[k];
                const float r2 = fmaf(dz, dz, fmaf(dy, dy, fmaf(dx, dx, eps2)));
                const float inv = nb_rsqrt(r2);
#if NB_EQUAL_MASS
                const float s = inv * inv * inv;
#else
                const float s = (o.w * inv) * (inv * inv);
#endif
#if NB_ACCURATE
                ax[k] += (double)(s * dx);
                ay[k] += (double)(s * dy);
                az[k] += (double)(s * dz);
#else
                ax[k] = fmaf(s, dx, ax[k]);
                ay[k] = fmaf(s, dy, ay[k]);
                az[k] = fmaf(s, dz, az[k]);
#endif
            }
        }
    }
    float4* o = out + (size_t)(split_base + blockIdx.y) * n_i_pad + mine;
#pragma unroll
    for (int k = 0; k < NB_IPT; ++k)
        o[k * NB_THREADS] = make_float4((float)ax[k], (float)ay[k], (float)az[k], 0.f);
}
#endif

// Each pair of particles once (Newton's third law): tiles of S = NB_THREADS·NB_IPT
// particles, tile I's in registers (NB_IPT per thread, as nbody_forces holds them) against
// tile J's through shared memory; a pair's term d/r^3 adds to i and, negated, to j. A
// thread's terms for one j are summed over its NB_IPT i-particles, over the warp by
// shuffles and over the warps in warp order, so the force on j is a fixed sum. Per pair:
// nbody_forces' 12 instructions and 3 FFMA more for j (15 for two interactions), plus 18
// per j and warp for the shuffles (per 32·NB_IPT pairs).
//
// acc starts at zero. round < 0: tiles first, first + stride, ... against themselves
// (blockIdx.x-th of them; i-side only), added to slot 0; else rounds round + blockIdx.y ·
// stride (< tiles - 1) of the circle method, tiles - 1 fixed and the others rotating, so
// that every tile is in exactly one pair of a round and every pair of tiles in exactly one
// round; each pair adds its sums to slot blockIdx.y of acc (slots n_pad apart). The rounds
// a launch runs side by side (more warps per SM than one round's tiles/2 blocks give)
// write distinct slots and no two blocks of a round touch the same tile, so every
// particle's sum in a slot is added in round order: the same bits on every run (several
// devices take every stride-th round and tile, first = the device). Padding particles are
// far and massless: their terms are zero.
template <bool MUTUAL>
__device__ __forceinline__ void nbody_tile_pair(const float4* __restrict__ xm, float4* acc,
                                                int I, int J, float eps2) {
    __shared__ float4 tile[NB_THREADS];
    __shared__ float warp_sums[NB_THREADS / 32][NB_THREADS][3];
    constexpr int S = NB_THREADS * NB_IPT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    // Lanes 0, 1, 2 store the warp's x, y, z sums of each j here.
    float* const warp_out = &warp_sums[warp][0][min(lane, 2)];
    float px[NB_IPT], py[NB_IPT], pz[NB_IPT], ax[NB_IPT], ay[NB_IPT], az[NB_IPT];
#if !NB_EQUAL_MASS
    float pm[NB_IPT];
#endif
#pragma unroll
    for (int k = 0; k < NB_IPT; ++k) {
        const float4 p = xm[I * S + k * NB_THREADS + threadIdx.x];
        px[k] = p.x; py[k] = p.y; pz[k] = p.z;
#if !NB_EQUAL_MASS
        pm[k] = p.w;
#endif
        ax[k] = 0.f; ay[k] = 0.f; az[k] = 0.f;
    }
    for (int c = 0; c < NB_IPT; ++c) {
        __syncthreads();
        tile[threadIdx.x] = xm[J * S + c * NB_THREADS + threadIdx.x];
        __syncthreads();
        NB_UNROLL_PRAGMA(NB_UNROLL)
        for (int j = 0; j < NB_THREADS; ++j) {
            const float4 o = tile[j];
            float qx = 0.f, qy = 0.f, qz = 0.f;
#pragma unroll
            for (int k = 0; k < NB_IPT; ++k) {
                const float dx = o.x - px[k], dy = o.y - py[k], dz = o.z - pz[k];
                const float r2 = fmaf(dz, dz, fmaf(dy, dy, fmaf(dx, dx, eps2)));
                const float inv = nb_rsqrt(r2);
                const float t = inv * inv * inv;
#if NB_EQUAL_MASS
                const float s = t, u = t;
#else
                const float s = o.w * t, u = pm[k] * t;
#endif
                ax[k] = fmaf(s, dx, ax[k]);
                ay[k] = fmaf(s, dy, ay[k]);
                az[k] = fmaf(s, dz, az[k]);
                if (MUTUAL) {
                    qx = fmaf(-u, dx, qx);
                    qy = fmaf(-u, dy, qy);
                    qz = fmaf(-u, dz, qz);
                }
            }
            if (MUTUAL) {
                // The three sums over the warp in 8 shuffles (GROMACS' j-force reduction):
                // pairs leave x in even lanes and y in odd ones, quads z in lane 2 of
                // each four, then one value per lane halves down to lanes 0, 1, 2.
                qx += __shfl_down_sync(0xffffffffu, qx, 1);
                qy += __shfl_up_sync(0xffffffffu, qy, 1);
                qz += __shfl_down_sync(0xffffffffu, qz, 1);
                if (lane & 1) qx = qy;
                qx += __shfl_down_sync(0xffffffffu, qx, 2);
                qz += __shfl_up_sync(0xffffffffu, qz, 2);
                if (lane & 2) qx = qz;
                qx += __shfl_down_sync(0xffffffffu, qx, 4);
                qx += __shfl_down_sync(0xffffffffu, qx, 8);
                qx += __shfl_down_sync(0xffffffffu, qx, 16);
                if (lane < 3) warp_out[3 * j] = qx;
            }
        }
        if (MUTUAL) {
            __syncthreads();
            // The chunk's sums into J's particle c·NB_THREADS + threadIdx.x: this
            // thread's alone in the round.
            float4& a = acc[J * S + c * NB_THREADS + threadIdx.x];
            float4 b = a;
#pragma unroll
            for (int w = 0; w < NB_THREADS / 32; ++w) {
                const float* v = warp_sums[w][threadIdx.x];
                b.x += v[0]; b.y += v[1]; b.z += v[2];
            }
            a = b;
        }
    }
#pragma unroll
    for (int k = 0; k < NB_IPT; ++k) {
        float4& a = acc[I * S + k * NB_THREADS + threadIdx.x];
        const float4 o = a;
        a = make_float4(o.x + ax[k], o.y + ay[k], o.z + az[k], 0.f);
    }
}

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_mutual)
extern "C" __global__ void __launch_bounds__(NB_THREADS, NB_MINB)
nbody_mutual(const float4* __restrict__ xm, float4* __restrict__ acc, int tiles, int round,
             int first, int stride, int n_pad, float eps2) {
    if (round < 0) {
        const int t = first + blockIdx.x * stride;
        if (t < tiles) nbody_tile_pair<false>(xm, acc, t, t, eps2);
        return;
    }
    round += blockIdx.y * stride;
    acc += (size_t)blockIdx.y * n_pad;
    if (round >= tiles - 1) return;
    const int m = tiles - 1, q = blockIdx.x;
    const int I = q == 0 ? m : (round + q) % m;
    const int J = q == 0 ? round : (round - q + m) % m;
    nbody_tile_pair<true>(xm, acc, I, J, eps2);
}
#endif

// Sum the splits of each particle in split order (deterministic) and kick:
// v += scale * a * h (f64), scale = G (or G*m with NB_EQUAL_MASS).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_kick)
extern "C" __global__ void nbody_kick(const float4* __restrict__ parts, int splits, int n_pad,
                                      double* __restrict__ v, int n, double scale, double h) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        double a[3] = {0.0, 0.0, 0.0};
        for (int s = 0; s < splits; ++s) {
            const float4 p = parts[(size_t)s * n_pad + i];
            a[0] += p.x; a[1] += p.y; a[2] += p.z;
        }
        v[3 * i] += scale * a[0] * h;
        v[3 * i + 1] += scale * a[1] * h;
        v[3 * i + 2] += scale * a[2] * h;
    }
}
#endif

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_drift)
extern "C" __global__ void nbody_drift(double* __restrict__ x, const double* __restrict__ v,
                                       int n, double dt) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 3 * n; i += gridDim.x * blockDim.x)
        x[i] += v[i] * dt;
}
#endif

// The potential per unit mass for the diagnostics, in f64 and in the CPU reference's
// order of operations (no contraction, IEEE sqrt and division): the same bits.
// phi_i = -g * sum_{j != i} m_j / sqrt(r^2 + eps^2), summed over j in index order. One i
// per thread, j through shared memory; the self pair is skipped by index (a select).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_potential)
extern "C" __global__ void __launch_bounds__(256)
nbody_potential(const double* __restrict__ x, const double* __restrict__ m,
                double* __restrict__ phi, int n, double eps2, double g) {
    __shared__ double4 tile[256];
    const int i = blockIdx.x * 256 + threadIdx.x;
    const int ii = min(i, n - 1);
    const double xi = x[3 * ii], yi = x[3 * ii + 1], zi = x[3 * ii + 2];
    double sum = 0.0;
    for (int t = 0; t < n; t += 256) {
        __syncthreads();
        const int j = t + threadIdx.x;
        tile[threadIdx.x] = j < n ? make_double4(x[3 * j], x[3 * j + 1], x[3 * j + 2], m[j])
                                  : make_double4(0.0, 0.0, 0.0, 0.0);
        __syncthreads();
        const int count = min(256, n - t);
        for (int k = 0; k < count; ++k) {
            const double4 o = tile[k];
            const double dx = o.x - xi, dy = o.y - yi, dz = o.z - zi;
            const double r2 = eps2 + dx * dx + dy * dy + dz * dz;
            const double inv = 1.0 / sqrt(r2);
            sum -= (t + k == i) ? 0.0 : o.w * inv;
        }
    }
    if (i < n) phi[i] = g * sum;
}
#endif

// The CUDA sample's kernel (nbody_kernel.cuh, "bodyBodyInteraction"): one i per thread,
// blockDim j-particles per shared tile, r^2 = x*x + y*y + z*z then + eps^2, the inverse
// cube by two products. What the bench compares keisan's kernel with, in the same run.
// keisan compiles with --fmad=false, so the multiply-adds nvcc would contract in the
// sample are written as fmaf here, and rsqrtf is the flush-to-zero MUFU alone (as
// nvcc -use_fast_math emits it): the sample's instruction stream at its best.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_baseline)
extern "C" __global__ void __launch_bounds__(256)
nbody_baseline(const float4* __restrict__ pos, float4* __restrict__ acc, int n, float eps2) {
    __shared__ float4 shared[256];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float4 me = pos[i];
    float3 a = make_float3(0.f, 0.f, 0.f);
    for (int t = 0; t < n / 256; ++t) {
        shared[threadIdx.x] = pos[t * 256 + threadIdx.x];
        __syncthreads();
#pragma unroll 128
        for (int k = 0; k < 256; ++k) {
            const float4 bj = shared[k];
            float3 r = make_float3(bj.x - me.x, bj.y - me.y, bj.z - me.z);
            float dist2 = fmaf(r.z, r.z, fmaf(r.y, r.y, r.x * r.x));
            dist2 += eps2;
            float inv;
            asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(inv) : "f"(dist2));
            const float inv3 = inv * inv * inv;
            const float s = bj.w * inv3;
            a.x = fmaf(r.x, s, a.x);
            a.y = fmaf(r.y, s, a.y);
            a.z = fmaf(r.z, s, a.z);
        }
        __syncthreads();
    }
    acc[i] = make_float4(a.x, a.y, a.z, 0.f);
}
#endif

// The cycle model's memory latency L: one thread follows `hops` dependent loads through
// next[] from `start` (a stride that leaves every cache line and page behind; each call
// starts elsewhere, so no line is in L2 from an earlier call); *out keeps the chain.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_nbody_chase)
extern "C" __global__ void nbody_chase(const unsigned* __restrict__ next, unsigned start,
                                       int hops, unsigned* __restrict__ out) {
    unsigned i = start;
    for (int h = 0; h < hops; ++h) i = next[i];
    *out = i;
}
#endif
