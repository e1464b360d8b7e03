// Probe (issue 11): red-black SOR with per-node stencil ids and a coefficient table,
// temporally blocked as heat_tb3_pass (src/solvers/heat/kernels.cu), f32, natural layout.
//
// Each node has a byte `id` indexing a table of 8 floats: the six face weights already
// divided by the diagonal and multiplied by omega (A), the charge term (B, times omega over
// the diagonal) and 1 - omega (O). The update of a free node is then
//     V' = O*V + B + Axm*Vxm + Axp*Vxp + Aym*Vym + Ayp*Vyp + Azm*Vzm + Azp*Vzp
// (7 multiply-adds, in that order), and a held node's entry (A = B = 0, O = 1) gives V'
// = V exactly: no branch, no division, no class lookups per face. Values outside the grid
// read as 0 and have the held id 0.
//
// rb_half: one colour's half-step over the whole grid (the reference, in place).
// rb_tb: TB_T half-steps per pass (red, black, red, ...; TB_T even), u -> un, a block of
// 32 x TB_W threads over a tile of 32*TB_V columns by TB_W*TB_R rows with a halo of TB_T,
// marching z as a wavefront: level l computes plane p - l.

#ifndef TB_T
#define TB_T 4
#endif
#ifndef TB_R
#define TB_R 4
#endif
#ifndef TB_W
#define TB_W 12
#endif
#ifndef TB_V
#define TB_V 2
#endif
#ifndef CONTRACT
#define CONTRACT 1
#endif
#ifndef REAL
#define REAL float
#endif
// Bits per stored id: 8 (u8 per node, at most 256 table entries) or 16 (u16).
#ifndef IDB
#define IDB 8
#endif
// The pass's last iteration also sums res² and V² of its output nodes (a check pass).
#ifndef SUMS
#define SUMS 0
#endif
typedef REAL real;
#if IDB == 8
typedef unsigned char idt1;
#else
typedef unsigned short idt1;
#endif
struct __align__(4 * sizeof(real)) real4 { real x, y, z, w; };

__device__ __forceinline__ real mac(real a, real b, real c) {
#if CONTRACT
    return fma(a, b, c);
#else
    return a * b + c;
#endif
}

__device__ __forceinline__ real update(const real4 a, const real4 b, real c, real xm,
                                        real xp, real ym, real yp, real zm, real zp) {
    real s = mac(b.w, c, b.z);
    s = mac(a.x, xm, s);
    s = mac(a.y, xp, s);
    s = mac(a.z, ym, s);
    s = mac(a.w, yp, s);
    s = mac(b.x, zm, s);
    s = mac(b.y, zp, s);
    return s;
}

extern "C" __global__ void rb_half(real* __restrict__ u, const idt1* __restrict__ ids,
                                   const real4* __restrict__ table, int nz, int ny, int nx,
                                   int colour) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y, z = blockIdx.z;
    if (x >= nx || ((x + y + z) & 1) != colour) return;
    const long ms = (long)ny * nx, i = (long)z * ms + (long)y * nx + x;
    const int id = ids[i];
    const real4 a = table[2 * id], b = table[2 * id + 1];
    const real xm = x > 0 ? u[i - 1] : 0, xp = x < nx - 1 ? u[i + 1] : 0;
    const real ym = y > 0 ? u[i - nx] : 0, yp = y < ny - 1 ? u[i + nx] : 0;
    const real zm = z > 0 ? u[i - ms] : 0, zp = z < nz - 1 ? u[i + ms] : 0;
    u[i] = update(a, b, u[i], xm, xp, ym, yp, zm, zp);
}

extern "C" __global__ void copy4(const float4* __restrict__ a, float4* __restrict__ b, long n) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
        b[i] = a[i];
}

struct __align__(TB_V * sizeof(real)) vec {
    real v[TB_V];
};
// A lane's ids of one row: TB_V ids of IDB bits.
template <int BITS> struct idw;
template <> struct idw<16> { using t = unsigned short; };
template <> struct idw<32> { using t = unsigned int; };
template <> struct idw<64> { using t = unsigned long long; };

template <bool B> struct flag { static constexpr bool value = B; };

__device__ __forceinline__ vec ldv(const real* p) { return *(const vec*)p; }
__device__ __forceinline__ void stv(real* p, const vec& r) { *(vec*)p = r; }

extern "C" __global__ void __launch_bounds__(32 * TB_W, 1)
    rb_tb(const real* __restrict__ u, real* __restrict__ un,
          const idt1* __restrict__ ids, const real4* __restrict__ table, int ntable, int nz,
          int ny, int nx, int chunk, double* __restrict__ sums) {
    constexpr int T = TB_T, R = TB_R, W = TB_W, V = TB_V;
    static_assert(T % 2 == 0 && R % 2 == 0 && V % 2 == 0, "even levels, rows and values");
    constexpr int HX = (T + V - 1) / V * V;
    constexpr int TXO = 32 * V - 2 * HX, TYO = W * R - 2 * T;
    using idt = typename idw<V * IDB>::t;
    extern __shared__ vec sm[];  // [buffer][level][warp][first, last row][lane], then the table
    constexpr int LS = W * 2 * 32;
    real4* const tab = (real4*)(sm + 2 * T * LS);
    const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane;
    for (int i = tid; i < 2 * ntable; i += 32 * W) tab[i] = table[i];
    for (int i = tid; i < 2 * T * LS; i += 32 * W)
#pragma unroll
        for (int e = 0; e < V; ++e) sm[i].v[e] = 0;
    double res2 = 0.0, v2 = 0.0;
    __syncthreads();
    const int tile_x0 = (int)blockIdx.x * TXO - HX, tile_y0 = (int)blockIdx.y * TYO - T;
    const int gx = tile_x0 + lane * V, gy = tile_y0 + w * R;
    const long ms = (long)ny * nx;
    const int c0 = blockIdx.z * chunk, c1 = min(c0 + chunk, nz);
    const bool x_in = gx >= 0 && gx < nx;  // nx % V == 0
    const bool lane_out = lane >= HX / V && lane < 32 - HX / V;
    unsigned row_in = 0, row_out = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int y = gy + r, ty = w * R + r;
        if (x_in && y >= 0 && y < ny) row_in |= 1u << r;
        if (x_in && y >= 0 && y < ny && lane_out && ty >= T && ty < W * R - T) row_out |= 1u << r;
    }
    const long col = x_in ? (long)max(gy, 0) * nx + gx : 0;
    auto row_at = [&](int r) { return (long)(gy + r - max(gy, 0)) * nx; };
    vec below[T][R], centre[T][R], ahead[R];
    idt idq[T][R], idahead[R];
#pragma unroll
    for (int l = 0; l < T; ++l)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            idq[l][r] = 0;
#pragma unroll
            for (int e = 0; e < V; ++e) below[l][r].v[e] = centre[l][r].v[e] = 0;
        }
    const int p0 = max(c0 - T, 0);  // even: chunk and T even
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const bool in = (row_in >> r & 1) && p0 < nz;
        if (in) {
            ahead[r] = ldv(u + p0 * ms + col + row_at(r));
            idahead[r] = *(const idt*)(ids + p0 * ms + col + row_at(r));
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) ahead[r].v[e] = 0;
            idahead[r] = 0;
        }
    }
    const int up_at = max(w - 1, 0) * 64 + 32 + lane, down_at = min(w + 1, W - 1) * 64 + lane;
    const int first_at = w * 64 + lane, last_at = w * 64 + 32 + lane;

    auto round = [&](auto odd, int p, int k) {
        constexpr int PP = decltype(odd)::value ? 1 : 0;
        const vec* const rd = sm + ((k & 1) ^ 1) * T * LS;
        vec* const wr = sm + (k & 1) * T * LS;
        vec v[R];
        idt idcur[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            v[r] = ahead[r];
            idcur[r] = idahead[r];
            if ((row_in >> r & 1) && p + 1 < nz) {
                ahead[r] = ldv(u + (p + 1) * ms + col + row_at(r));
                idahead[r] = *(const idt*)(ids + (p + 1) * ms + col + row_at(r));
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) ahead[r].v[e] = 0;
                idahead[r] = 0;
            }
        }
        wr[first_at] = v[0];
        wr[last_at] = v[R - 1];
#pragma unroll
        for (int l = 1; l <= T; ++l) {
            const vec up = rd[(l - 1) * LS + up_at];
            const vec down = rd[(l - 1) * LS + down_at];
            vec res[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const vec& c = centre[l - 1][r];
                res[r] = c;
                // The elements of colour (l - 1) & 1 on plane p - l: e = 1 + r + p (mod 2).
                constexpr int E0 = 0;  // placeholder for the loop below
                (void)E0;
                const int ep = (1 + r + PP) & 1;
                real left = 0, right = 0;
                if (ep == 0) left = __shfl_up_sync(0xffffffffu, c.v[V - 1], 1);
                else right = __shfl_down_sync(0xffffffffu, c.v[0], 1);
#pragma unroll
                for (int e = ep; e < V; e += 2) {
                    const int id = (int)(idq[l - 1][r] >> (IDB * e)) & ((1 << IDB) - 1);
                    const real4 a = tab[2 * id], b = tab[2 * id + 1];
                    const real xm = e > 0 ? c.v[e - 1] : left;
                    const real xp = e < V - 1 ? c.v[e + 1] : right;
                    const real ym = r > 0 ? centre[l - 1][r - 1].v[e] : up.v[e];
                    const real yp = r < R - 1 ? centre[l - 1][r + 1].v[e] : down.v[e];
                    res[r].v[e] = update(a, b, c.v[e], xm, xp, ym, yp, below[l - 1][r].v[e],
                                         v[r].v[e]);
#if SUMS
                    // The last iteration's nodes of the tile's output (held ones add 0).
                    if (l > T - 2 && (row_out >> r & 1) && p - l >= c0 && p - l < c1) {
                        const double d = (double)(res[r].v[e] - c.v[e]);
                        res2 = fma(d, d, res2);
                        v2 = fma((double)res[r].v[e], (double)res[r].v[e], v2);
                    }
#endif
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                below[l - 1][r] = centre[l - 1][r];
                centre[l - 1][r] = v[r];
                v[r] = res[r];
            }
            if (l < T) {
                wr[l * LS + first_at] = v[0];
                wr[l * LS + last_at] = v[R - 1];
            }
        }
        const int q = p - T;
        if (q >= c0 && q < c1) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (row_out >> r & 1) stv(un + q * ms + col + row_at(r), v[r]);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int l = T - 1; l > 0; --l) idq[l][r] = idq[l - 1][r];
            idq[0][r] = idcur[r];
        }
        __syncthreads();
    };
    const int pend = c1 + T;
    int k = 0;
    for (int p = p0; p < pend; p += 2, k += 2) {
        round(flag<false>{}, p, k);
        if (p + 1 < pend) round(flag<true>{}, p + 1, k + 1);
    }
#if SUMS
    for (int o = 16; o > 0; o >>= 1) {
        res2 += __shfl_down_sync(0xffffffffu, res2, o);
        v2 += __shfl_down_sync(0xffffffffu, v2, o);
    }
    if (lane == 0) {
        atomicAdd(sums, res2);
        atomicAdd(sums + 1, v2);
    }
#endif
}
