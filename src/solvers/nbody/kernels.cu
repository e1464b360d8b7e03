// Direct N-body forces in f32 (seed 001's kernel) and the f64 leapfrog around them.
// Compiled with -Dreal=float|double (unused here: the force arithmetic is f32 by design,
// the integration f64) and -DNB_TILE (j-particles per shared-memory tile = threads per
// block).

#ifndef NB_TILE
#define NB_TILE 256
#endif
#ifndef NB_ACCURATE
#define NB_ACCURATE 0
#endif

// x, m (f64, n particles) -> xm (f32 x y z m, n_pad entries; the padding has zero mass
// at the origin, so it adds nothing to any force).
extern "C" __global__ void nbody_pack(const double* __restrict__ x, const double* __restrict__ m,
                                      float4* __restrict__ xm, int n, int n_pad) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_pad; i += gridDim.x * blockDim.x) {
        xm[i] = i < n ? make_float4((float)x[3 * i], (float)x[3 * i + 1], (float)x[3 * i + 2],
                                    (float)m[i])
                      : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// The force on particle i from the j-particles of tiles [t0, t1): one i per thread, the
// j-particles through shared memory, r^2 = eps^2 + dx^2 + dy^2 + dz^2 as a chain of FMAs,
// rsqrt, no branch (a pair at zero separation — i itself, or any pair when eps = 0 —
// gets inv = 0 by a select). out[(split * n_pad + i)] = (ax, ay, az, phi) / G, phi
// without the self term. Accumulates in f32, or with NB_ACCURATE the f32 terms in f64.
extern "C" __global__ void __launch_bounds__(NB_TILE)
nbody_forces(const float4* __restrict__ xm, float4* __restrict__ out, int n_pad, int tiles_per_split,
             float eps2) {
    __shared__ float4 tile[NB_TILE];
    const int i = blockIdx.x * NB_TILE + threadIdx.x;
    const int split = blockIdx.y;
    const float4 me = xm[i];
    const int tiles = n_pad / NB_TILE;
    const int t0 = split * tiles_per_split;
    const int t1 = min(t0 + tiles_per_split, tiles);
#if NB_ACCURATE
    double ax = 0.0, ay = 0.0, az = 0.0, phi = 0.0;
#else
    float ax = 0.f, ay = 0.f, az = 0.f, phi = 0.f;
#endif
    for (int t = t0; t < t1; ++t) {
        __syncthreads();
        tile[threadIdx.x] = xm[t * NB_TILE + threadIdx.x];
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < NB_TILE; ++k) {
            const float4 o = tile[k];
            const float dx = o.x - me.x, dy = o.y - me.y, dz = o.z - me.z;
            const float r2 = fmaf(dz, dz, fmaf(dy, dy, fmaf(dx, dx, eps2)));
            const float inv = r2 > 0.f ? rsqrtf(r2) : 0.f;
            const float mi = o.w * inv;
            const float s = mi * inv * inv;
#if NB_ACCURATE
            ax += (double)(s * dx);
            ay += (double)(s * dy);
            az += (double)(s * dz);
            phi += (double)mi;
#else
            ax = fmaf(s, dx, ax);
            ay = fmaf(s, dy, ay);
            az = fmaf(s, dz, az);
            phi += mi;
#endif
        }
    }
    out[(size_t)split * n_pad + i] = make_float4((float)ax, (float)ay, (float)az, (float)-phi);
}

// Sum the splits of each particle in split order (deterministic), scale by G, and kick:
// v += G * a * h (f64). With `phi_out`, also phi_i = G * phi (self term excluded: inv = 0
// at zero separation).
extern "C" __global__ void nbody_kick(const float4* __restrict__ parts, int splits, int n_pad,
                                      double* __restrict__ v, int n, double g, double h,
                                      double* __restrict__ phi_out) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        double a[4] = {0.0, 0.0, 0.0, 0.0};
        for (int s = 0; s < splits; ++s) {
            const float4 p = parts[(size_t)s * n_pad + i];
            a[0] += p.x; a[1] += p.y; a[2] += p.z; a[3] += p.w;
        }
        v[3 * i] += g * a[0] * h;
        v[3 * i + 1] += g * a[1] * h;
        v[3 * i + 2] += g * a[2] * h;
        if (phi_out) phi_out[i] = g * a[3];
    }
}

extern "C" __global__ void nbody_drift(double* __restrict__ x, const double* __restrict__ v,
                                       int n, double dt) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 3 * n; i += gridDim.x * blockDim.x)
        x[i] += v[i] * dt;
}
