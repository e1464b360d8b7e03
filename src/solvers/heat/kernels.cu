// Explicit heat equation (FTCS), fields row-major (z, y, x), x fastest.
// Compiled with -Dreal=float|double. Keep heat_update() in step with solvers/heat/cpu.rs.

// (a + b) − 2c is evaluated as fma(−2, c, a + b): 2c is exact, so the single rounding of
// the fma is that of the subtraction, and the result is the CPU's bit for bit.
__device__ __forceinline__ real heat_update(real c, real xm, real xp, real ym, real yp, real zm,
                                            real zp, real rx, real ry, real rz) {
    const real m2 = (real)-2;
    return c + (rx * fma(m2, c, xm + xp) + ry * fma(m2, c, ym + yp) + rz * fma(m2, c, zm + zp));
}

#ifndef MARCH
#define MARCH 32
#endif
// Points along the march whose loads are issued together (memory-level parallelism).
#define GROUP 2

// One step inside a box of bz·by·bx values whose element 0 sits at global index
// (oz, oy, ox) of an nz·ny·nx grid: writes the region [z0,z1)×[y0,y1)×[x0,x1) of un from
// u. Grid-boundary points are copied (Dirichlet), the rest updated. The in-core engine is
// the box that is the whole grid; the pyramid shrinks the region by one per step on halo
// sides. Threads tile x and the middle axis (y in 3D) and march MARCH points along the
// slowest real axis (z in 3D, y in 2D), keeping the march neighbours in registers; loads
// are unconditional (edge points read themselves) so that GROUP points' loads are in
// flight together. *bad holds the first step that produced a non-finite value (~0 while
// none has); once set, later launches return at once.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_heat_box_step)
extern "C" __global__ void heat_box_step(const real* __restrict__ u, real* __restrict__ un,
                                         int bz, int by, int bx, int z0, int z1, int y0, int y1,
                                         int x0, int x1, int oz, int oy, int ox, int nz, int ny,
                                         int nx, int dims, real rz, real ry, real rx, u64 step,
                                         u64* __restrict__ bad) {
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const bool mz = dims != 2;  // march along z (3D; trivially in 1D), else along y
    const int x = x0 + blockIdx.x * blockDim.x + threadIdx.x;
    const int o = (mz ? y0 : z0) + blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= x1 || o >= (mz ? y1 : z1)) return;
    const int m0 = mz ? z0 : y0, m1 = mz ? z1 : y1;
    const long ms = mz ? (long)by * bx : (long)bx;
    const int mext = mz ? bz : by;
    const int mg = mz ? oz : oy, mn = mz ? nz : ny;
    const bool mreal = mz ? dims >= 3 : true;
    const bool lateral_edge =
        ox + x == 0 || ox + x == nx - 1 || (mz && dims >= 2 && (oy + o == 0 || oy + o == ny - 1));
    const long dx = lateral_edge ? 0 : 1;
    const long dy = (!lateral_edge && mz && dims >= 2) ? bx : 0;
    const int chunks = (m1 - m0 + MARCH - 1) / MARCH;
    bool finite = true;
    for (int b = blockIdx.z; b < chunks; b += gridDim.z) {
        const int s0 = m0 + b * MARCH, s1 = min(s0 + MARCH, m1);
        long i = ((long)(mz ? s0 : o) * by + (mz ? o : s0)) * bx + x;
        real cm = u[s0 > 0 ? i - ms : i];
        real cc = u[i];
        for (int m = s0; m < s1; m += GROUP) {
            real c[GROUP + 1], xm[GROUP], xp[GROUP], ym[GROUP], yp[GROUP];
            c[0] = cc;
#pragma unroll
            for (int g = 0; g < GROUP; ++g) {
                const int mm = min(m + g, s1 - 1);
                const long ii = i + (long)(mm - m) * ms;
                c[g + 1] = u[mm + 1 < mext ? ii + ms : ii];
                xm[g] = u[ii - dx];
                xp[g] = u[ii + dx];
                ym[g] = u[ii - dy];
                yp[g] = u[ii + dy];
            }
#pragma unroll
            for (int g = 0; g < GROUP; ++g) {
                const int mm = m + g;
                if (mm >= s1) break;
                const real cur = c[g], next = c[g + 1], prev = g == 0 ? cm : c[g - 1];
                const bool edge = lateral_edge || (mreal && (mg + mm == 0 || mg + mm == mn - 1));
                real v = cur;
                if (!edge) {
                    if (!mz) {
                        v = heat_update(cur, xm[g], xp[g], prev, next, cur, cur, rx, ry, rz);
                    } else if (dims >= 3) {
                        v = heat_update(cur, xm[g], xp[g], ym[g], yp[g], prev, next, rx, ry, rz);
                    } else {
                        v = heat_update(cur, xm[g], xp[g], cur, cur, cur, cur, rx, ry, rz);
                    }
                }
                finite &= isfinite(v);
                un[i + (long)g * ms] = v;
            }
            cm = c[GROUP - 1];
            cc = c[GROUP];
            i += (long)GROUP * ms;
        }
    }
    if (!finite) atomicMin(bad, step);
}
#endif

// N consecutive values loaded and stored as one aligned vector (ld/st.global.v2/.v4).
template <int N>
struct alignas(N * sizeof(real)) vals {
    real v[N];
};

#ifndef VEC
#define VEC (16 / (int)sizeof(real))  // values per 16-byte vector
#endif
#ifndef VGROUP
#define VGROUP 2
#endif

template <int N>
__device__ __forceinline__ vals<N> ldv(const real* p) {
    return *reinterpret_cast<const vals<N>*>(p);
}

// heat_box_step for boxes whose rows are whole vectors (bx % VEC == 0): each thread owns
// VEC consecutive x values of one row and marches the slowest axis like heat_box_step.
// A warp spans 32 vectors of a row; x neighbours come from the neighbouring lanes by
// shuffle (the warp's end lanes load the one value beyond), so a point costs a quarter of
// the load instructions. Same update and operand order as heat_box_step, so the result
// is the same bit for bit. blockDim.x must be a multiple of 32 (warps lie along x).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_heat_vec_step)
extern "C" __global__ void heat_vec_step(const real* __restrict__ u, real* __restrict__ un,
                                         int bz, int by, int bx, int z0, int z1, int y0, int y1,
                                         int x0, int x1, int oz, int oy, int ox, int nz, int ny,
                                         int nx, int dims, real rz, real ry, real rx, u64 step,
                                         u64* __restrict__ bad) {
    constexpr int V = VEC, G = VGROUP;
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const bool mz = dims != 2;
    const int lane = threadIdx.x & 31;
    const int first = x0 / V + blockIdx.x * blockDim.x;
    const int g = first + threadIdx.x;
    const int o = (mz ? y0 : z0) + blockIdx.y * blockDim.y + threadIdx.y;
    // Both exits are uniform across a warp, which the shuffles need.
    if (o >= (mz ? y1 : z1) || (first + (int)(threadIdx.x & ~31u)) * V >= x1) return;
    const int gc = min(g, bx / V - 1);  // lanes past the row shadow the last vector
    const int xb = gc * V;
    const int m0 = mz ? z0 : y0, m1 = mz ? z1 : y1;
    const long ms = mz ? (long)by * bx : (long)bx;
    const int mext = mz ? bz : by;
    const int mg = mz ? oz : oy, mn = mz ? nz : ny;
    const bool mreal = mz ? dims >= 3 : true;
    const bool d3 = mz && dims >= 3;
    const bool y_edge = mz && dims >= 2 && (oy + o == 0 || oy + o == ny - 1);
    const long dy = (!y_edge && d3) ? bx : 0;
    const bool need_left = lane == 0 && xb > 0, need_right = lane == 31 && xb + V < bx;
    unsigned edge_mask = 0, in_region = 0;
#pragma unroll
    for (int e = 0; e < V; ++e) {
        const int gx = ox + xb + e;
        if (y_edge || gx == 0 || gx == nx - 1) edge_mask |= 1u << e;
        if (g == gc && xb + e >= x0 && xb + e < x1) in_region |= 1u << e;
    }
    const bool whole = in_region == (1u << V) - 1;
    const int chunks = (m1 - m0 + MARCH - 1) / MARCH;
    bool finite = true;
    for (int b = blockIdx.z; b < chunks; b += gridDim.z) {
        const int s0 = m0 + b * MARCH, s1 = min(s0 + MARCH, m1);
        long i = ((long)(mz ? s0 : o) * by + (mz ? o : s0)) * bx + xb;
        vals<V> cm = ldv<V>(u + (s0 > 0 ? i - ms : i));
        vals<V> cc = ldv<V>(u + i);
        for (int m = s0; m < s1; m += G) {
            vals<V> c[G + 1], ym[G], yp[G];
            real lf[G], rt[G];
            c[0] = cc;
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const int mm = min(m + k, s1 - 1);
                const long ii = i + (long)(mm - m) * ms;
                c[k + 1] = ldv<V>(u + (mm + 1 < mext ? ii + ms : ii));
                if (d3) {
                    ym[k] = ldv<V>(u + ii - dy);
                    yp[k] = ldv<V>(u + ii + dy);
                }
                lf[k] = need_left ? u[ii - 1] : (real)0;
                rt[k] = need_right ? u[ii + V] : (real)0;
            }
#pragma unroll
            for (int k = 0; k < G; ++k) {
                const int mm = m + k;
                if (mm >= s1) break;
                const vals<V> cur = c[k], next = c[k + 1], prev = k == 0 ? cm : c[k - 1];
                real left = __shfl_up_sync(0xffffffffu, cur.v[V - 1], 1);
                real right = __shfl_down_sync(0xffffffffu, cur.v[0], 1);
                if (lane == 0) left = lf[k];
                if (lane == 31) right = rt[k];
                const bool march_edge = mreal && (mg + mm == 0 || mg + mm == mn - 1);
                vals<V> out;
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const real cv = cur.v[e];
                    const real xm = e > 0 ? cur.v[e - 1] : left;
                    const real xp = e < V - 1 ? cur.v[e + 1] : right;
                    real v;
                    if (!mz) {
                        v = heat_update(cv, xm, xp, prev.v[e], next.v[e], cv, cv, rx, ry, rz);
                    } else if (d3) {
                        v = heat_update(cv, xm, xp, ym[k].v[e], yp[k].v[e], prev.v[e], next.v[e],
                                        rx, ry, rz);
                    } else {
                        v = heat_update(cv, xm, xp, cv, cv, cv, cv, rx, ry, rz);
                    }
                    out.v[e] = (march_edge || (edge_mask >> e & 1)) ? cv : v;
                    if (in_region >> e & 1) finite &= isfinite(out.v[e]);
                }
                real* dst = un + i + (long)k * ms;
                if (whole) {
                    *reinterpret_cast<vals<V>*>(dst) = out;
                } else {
#pragma unroll
                    for (int e = 0; e < V; ++e)
                        if (in_region >> e & 1) dst[e] = out.v[e];
                }
            }
            cm = c[G - 1];
            cc = c[G];
            i += (long)G * ms;
        }
    }
    if (!finite) atomicMin(bad, step);
}
#endif

// Temporal blocking for the in-core engine (2D and 3D): TB_LEVELS steps per pass over the
// whole grid, u → un. A block of TB_X·TB_Y threads covers a tile of x (and y in 3D)
// including a halo of TB_LEVELS on each side, and marches the slowest axis (z in 3D, y in
// 2D) over `chunk` output planes. Level l computes plane p−l from level l−1's planes
// p−l−1, p−l (own column, registers) and p−l+1 (just computed), with level l−1's plane
// p−l's lateral neighbours in shared memory (double-buffered: one barrier per plane).
// Tile-edge columns and planes before the chunk are redundant and go wrong a point per
// level, which the halo absorbs. The update and its operand order are those of
// heat_box_step, so the result is the same bit for bit. *bad gets the pass's first step
// if an output is non-finite; the host replays the pass step by step to find the step.
#if defined(TB_LEVELS)
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_heat_tb_pass)
extern "C" __global__ void __launch_bounds__(TB_X * TB_Y)
    heat_tb_pass(const real* __restrict__ u, real* __restrict__ un, int nz, int ny, int nx,
                 int dims, real rz, real ry, real rx, int chunk, u64 step,
                 u64* __restrict__ bad) {
    constexpr int T = TB_LEVELS, TX = TB_X, TY = TB_Y;
    __shared__ real sm[2][T][TY][TX];
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const bool d3 = dims == 3;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int gx = blockIdx.x * (TX - 2 * T) - T + tx;
    const int gy = d3 ? (int)blockIdx.y * (TY - 2 * T) - T + ty : 0;
    const int M = d3 ? nz : ny;
    const long ms = d3 ? (long)ny * nx : (long)nx;
    const int c0 = blockIdx.z * chunk, c1 = min(c0 + chunk, M);
    const bool in_grid = gx >= 0 && gx < nx && (!d3 || (gy >= 0 && gy < ny));
    const bool fixed = !in_grid || gx == 0 || gx == nx - 1 || tx == 0 || tx == TX - 1 ||
                       (d3 && (gy == 0 || gy == ny - 1 || ty == 0 || ty == TY - 1));
    const bool out = in_grid && tx >= T && tx < TX - T && (!d3 || (ty >= T && ty < TY - T));
    const long col = in_grid ? (d3 ? (long)gy * nx + gx : gx) : 0;
    // Column values of level l-1 at planes p-l-1 (below) and p-l (centre).
    real below[T], centre[T];
#pragma unroll
    for (int l = 0; l < T; ++l) below[l] = centre[l] = (real)0;
    const int p0 = max(c0 - T, 0);
    real ahead = (in_grid && p0 < M) ? u[p0 * ms + col] : (real)0;
    bool finite = true;
    for (int p = p0, k = 0; p < c1 + T; ++p, ++k) {
        const int buf = k & 1;
        real v = ahead;
        ahead = (in_grid && p + 1 < M) ? u[(p + 1) * ms + col] : (real)0;
#pragma unroll
        for (int l = 1; l <= T; ++l) {
            const int q = p - l;
            const real prev = below[l - 1], cur = centre[l - 1];
            real res = cur;
            if (!fixed && q > 0 && q < M - 1) {
                const real xm = sm[buf ^ 1][l - 1][ty][tx - 1];
                const real xp = sm[buf ^ 1][l - 1][ty][tx + 1];
                if (d3) {
                    const real ym = sm[buf ^ 1][l - 1][ty - 1][tx];
                    const real yp = sm[buf ^ 1][l - 1][ty + 1][tx];
                    res = heat_update(cur, xm, xp, ym, yp, prev, v, rx, ry, rz);
                } else {
                    res = heat_update(cur, xm, xp, prev, v, cur, cur, rx, ry, rz);
                }
            }
            sm[buf][l - 1][ty][tx] = v;
            below[l - 1] = cur;
            centre[l - 1] = v;
            v = res;
        }
        const int q = p - T;
        if (out && q >= c0 && q < c1) {
            finite &= isfinite(v);
            un[q * ms + col] = v;
        }
        __syncthreads();
    }
    if (!finite) atomicMin(bad, step);
}
#endif
#endif

// Temporal blocking in 3D with the x and y neighbours in registers: TB3_LEVELS steps in
// one pass, like heat_box_step over a box of bz·by·bx values at global (oz, oy, ox) of an
// nz·ny·nx grid (bx % TB3_VEC == 0), writing the region [z0,z1)×[y0,y1)×[x0,x1) of the
// result after TB3_LEVELS steps. The in-core engine passes the whole grid; the pyramid a
// task's box and the region valid after the pass, TB3_LEVELS inside the region whose
// input is valid on halo sides, so no output depends on a stale value.
//
// A block of 32 × TB3_WARPS threads covers a tile of 32·TB3_VEC columns (x) by
// TB3_WARPS·TB3_ROWS rows (y), halo included; each thread holds TB3_VEC consecutive x
// values of TB3_ROWS consecutive rows for every level and marches z as a wavefront, level
// l computing plane p − l. x neighbours come from the thread itself or, across lanes, by
// shuffle; y neighbours from the thread itself or, across warps, from the neighbouring
// warp's first or last row, which each warp leaves in shared memory (double-buffered: one
// barrier per plane). The halo (TB3_LEVELS rows, x rounded up to whole vectors) absorbs
// the tile-edge points, which are updated from wrong but finite neighbours (a stable
// update is a weighted mean; values outside the box read as 0). Only the grid's boundary
// is held, and the march is compiled apart for tiles that touch the boundary in x or y or
// not and planes near z's boundary or not, so most of the work runs with no test.
//
// TB3_BOX: 0 the whole grid, 1 any box, 2 a slab of whole planes (the bounds the kernel
// knows at compile time cost no registers).
//
// A non-finite output sets *bad to the pass's first step (the in-core engine replays the
// pass to find the step). With TB3_PROBE the kernel finds the first level that computed a
// non-finite value; stale and tile-edge values being finite, that gives the exact step,
// and *bad gets that instead. In f32 every value computed at level l goes into a probe
// register of that level, p + v·0, which turns NaN once a non-finite value went in; in
// f64 each level's values of a plane are tested on their exponent bits (integer work,
// off the f64 pipe the update is bound by, and no register per level in a tile that
// spills), setting the level's bit in a mask. Each is the faster in its precision
// (docs/PERFORMANCE.md). Same update and operand order as heat_box_step,
// so the result is the same bit for bit.
#if defined(TB3_LEVELS)
#ifndef TB3_PROBE
#define TB3_PROBE 0
#endif
#ifndef TB3_BOX
#define TB3_BOX 1
#endif
// The gap between x's exponent field and all ones: zero exactly when x is not finite.
// Integer work, so the f64 probe keeps off the f64 pipe the update is bound by (f32 passes
// probe with FMAs instead).
__device__ __forceinline__ unsigned exponent_gap(double x) {
    return ~(unsigned)__double2hiint(x) & 0x7ff00000u;
}

template <bool B>
struct flag {
    static constexpr bool value = B;
};

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_heat_tb3_pass)
extern "C" __global__ void __launch_bounds__(32 * TB3_WARPS, 1)
    heat_tb3_pass(const real* __restrict__ u, real* __restrict__ un, int bz, int by, int bx,
                  int z0, int z1, int y0, int y1, int x0, int x1, int oz, int oy, int ox,
                  int nz, int ny, int nx, real rz, real ry, real rx, int chunk, u64 step,
                  u64* __restrict__ bad) {
    constexpr int T = TB3_LEVELS, R = TB3_ROWS, W = TB3_WARPS, V = TB3_VEC;
    constexpr int HX = (T + V - 1) / V * V;  // x halo in whole vectors
    constexpr int TXO = 32 * V - 2 * HX, TYO = W * R - 2 * T;  // output tile
#if TB3_BOX == 0
    // The whole grid (in-core): the box arguments are known, which frees registers.
    bz = nz, by = ny, bx = nx, oz = oy = ox = 0;
    z0 = y0 = x0 = 0, z1 = nz, y1 = ny, x1 = nx;
#elif TB3_BOX == 2
    // A slab: whole planes of the grid, only z bounded by the box.
    by = ny, bx = nx, oy = ox = 0;
    y0 = x0 = 0, y1 = ny, x1 = nx;
#endif
    static_assert(TXO > 0 && TYO > 0, "the halo covers the whole tile");
    using vec = vals<V>;
    // [buffer][level][warp][first row, last row][lane]
    extern __shared__ unsigned char shared_raw[];
    vec* const sm = reinterpret_cast<vec*>(shared_raw);
    constexpr int LS = W * 2 * 32;  // one level's rows
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const int lane = threadIdx.x, w = threadIdx.y;
    // Box-local coordinates of the tile (x from the vector holding x0) and the thread.
    const int tile_x0 = x0 / V * V + (int)blockIdx.x * TXO - HX;
    const int tile_y0 = y0 + (int)blockIdx.y * TYO - T;
    const int gx = tile_x0 + lane * V, gy = tile_y0 + w * R;
    const long ms = (long)by * bx;
    const int c0 = z0 + blockIdx.z * chunk, c1 = min(c0 + chunk, z1);
    const bool x_in = gx >= 0 && gx < bx;
    const bool lane_out = lane >= HX / V && lane < 32 - HX / V;
    unsigned row_in = 0, row_out = 0, row_fixed = 0, x_fixed = 0, x_out = 0;
    // The thread's column: its first row in the box at plane 0 (row r lies r·bx further).
    const int y_base = max(gy, 0);
    const long col = x_in ? (long)y_base * bx + gx : 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int y = gy + r, ty = w * R + r;
        const bool in = x_in && y >= 0 && y < by;
        if (in) row_in |= 1u << r;
        if (in && lane_out && ty >= T && ty < W * R - T && y >= y0 && y < y1)
            row_out |= 1u << r;
        if (oy + y == 0 || oy + y == ny - 1) row_fixed |= 1u << r;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
        if (ox + gx + e == 0 || ox + gx + e == nx - 1) x_fixed |= 1u << e;
        if (gx + e >= x0 && gx + e < x1) x_out |= 1u << e;
    }
    const bool x_whole = x_out == (1u << V) - 1;
    // Whether the tile holds part of the grid's boundary in x or y.
    const bool edge_tile = ox + tile_x0 <= 0 || ox + tile_x0 + 32 * V > nx - 1 ||
                           oy + tile_y0 <= 0 || oy + tile_y0 + W * R > ny - 1;
    vec below[T][R], centre[T][R], ahead[R];
    constexpr bool LEVEL_PROBES = TB3_PROBE && sizeof(real) == 4, LEVEL_BITS = TB3_PROBE && !LEVEL_PROBES;
    // Per level with LEVEL_PROBES; else probe[0] takes the outputs' v·0 (without TB3_PROBE).
    real probe[LEVEL_PROBES ? T : 1];
#pragma unroll
    for (int l = 0; l < (LEVEL_PROBES ? T : 1); ++l) probe[l] = (real)0;
    unsigned bad_levels = 0;  // with LEVEL_BITS: bit l − 1 once level l computed a non-finite value
#pragma unroll
    for (int l = 0; l < T; ++l)
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
            for (int e = 0; e < V; ++e) below[l][r].v[e] = centre[l][r].v[e] = (real)0;
    // Zeros in the edge rows the first round reads before any warp has written them: the
    // probe must see finite values only.
    for (int i = w * 32 + lane; i < 2 * T * LS; i += 32 * W)
#pragma unroll
        for (int e = 0; e < V; ++e) sm[i].v[e] = (real)0;
    __syncthreads();
    const int p0 = max(c0 - T, 0);
    // Row r of the thread lies at offset (gy + r − y_base)·bx from its column.
    auto row_at = [&](int r) { return (gy + r - y_base) * bx; };
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if ((row_in >> r & 1) && p0 < bz) {
            ahead[r] = ldv<V>(u + p0 * ms + col + row_at(r));
        } else {
#pragma unroll
            for (int e = 0; e < V; ++e) ahead[r].v[e] = (real)0;
        }
    }
    // Offsets within a level: the row above this warp's first (the previous warp's last),
    // the row below its last, and this warp's own first and last rows.
    const int up_at = max(w - 1, 0) * 64 + 32 + lane, down_at = min(w + 1, W - 1) * 64 + lane;
    const int first_at = w * 64 + lane, last_at = w * 64 + 32 + lane;
    // The grid's first and last planes in box coordinates.
    const int q_first = -oz, q_last = nz - 1 - oz;
    // The next plane to read and the plane the output goes to, advanced by a plane a round.
    const real* next_in = u + (long)(p0 + 1) * ms + col;
    real* out = un + (long)(p0 - T) * ms + col;

    // One plane of the march: level l of plane p − l for every l, then the output.
    auto plane = [&](auto edge, auto z_near, int p, int k) {
        constexpr bool EDGE = decltype(edge)::value, ZNEAR = decltype(z_near)::value;
        const vec* const rd = sm + ((k & 1) ^ 1) * T * LS;  // level planes of the last round
        vec* const wr = sm + (k & 1) * T * LS;
        vec v[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            v[r] = ahead[r];
            if ((row_in >> r & 1) && p + 1 < bz) ahead[r] = ldv<V>(next_in + row_at(r));
        }
        next_in += ms;
#pragma unroll
        for (int l = 1; l <= T; ++l) {
            const int q = p - l;
            vec res[R];
            if (ZNEAR && (q == q_first || q == q_last)) {
#pragma unroll
                for (int r = 0; r < R; ++r) res[r] = centre[l - 1][r];
            } else {
                const vec up = rd[(l - 1) * LS + up_at];
                const vec down = rd[(l - 1) * LS + down_at];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const vec& c = centre[l - 1][r];
                    const real left = __shfl_up_sync(0xffffffffu, c.v[V - 1], 1);
                    const real right = __shfl_down_sync(0xffffffffu, c.v[0], 1);
#pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const real xm = e > 0 ? c.v[e - 1] : left;
                        const real xp = e < V - 1 ? c.v[e + 1] : right;
                        const real ym = r > 0 ? centre[l - 1][r - 1].v[e] : up.v[e];
                        const real yp = r < R - 1 ? centre[l - 1][r + 1].v[e] : down.v[e];
                        res[r].v[e] = heat_update(c.v[e], xm, xp, ym, yp, below[l - 1][r].v[e],
                                                  v[r].v[e], rx, ry, rz);
                        if (LEVEL_PROBES) {
                            real& pl = probe[LEVEL_PROBES ? l - 1 : 0];
                            pl = fma(res[r].v[e], (real)0, pl);
                        }
                    }
                    if (EDGE && (row_fixed >> r & 1)) res[r] = c;
                }
                if (EDGE && x_fixed) {
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < V; ++e)
                            if (x_fixed >> e & 1) res[r].v[e] = centre[l - 1][r].v[e];
                }
                if (LEVEL_BITS) {
                    unsigned gap = exponent_gap(res[0].v[0]);
#pragma unroll
                    for (int r = 0; r < R; ++r)
#pragma unroll
                        for (int e = 0; e < V; ++e) gap = min(gap, exponent_gap(res[r].v[e]));
                    if (gap == 0) bad_levels |= 1u << (l - 1);
                }
            }
            wr[(l - 1) * LS + first_at] = v[0];
            wr[(l - 1) * LS + last_at] = v[R - 1];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                below[l - 1][r] = centre[l - 1][r];
                centre[l - 1][r] = v[r];
                v[r] = res[r];
            }
        }
        const int q = p - T;
        if (q >= c0 && q < c1) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (row_out >> r & 1) {
                    real* dst = out + row_at(r);
                    if (!TB3_PROBE) {
#pragma unroll
                        for (int e = 0; e < V; ++e)
                            if (x_out >> e & 1) probe[0] += v[r].v[e] * (real)0;
                    }
                    if (x_whole) {
                        *reinterpret_cast<vec*>(dst) = v[r];
                    } else {
#pragma unroll
                        for (int e = 0; e < V; ++e)
                            if (x_out >> e & 1) dst[e] = v[r].v[e];
                    }
                }
            }
        }
        out += ms;
        __syncthreads();
    };
    // Planes p none of whose levels lies on the grid's first or last plane
    // (q_first < p − l < q_last for l in 1..T) skip the z test.
    auto march = [&](auto edge) {
        const int end = c1 + T;
        const int safe0 = min(max(p0, q_first + T + 1), end);
        const int safe1 = max(min(q_last + 1, end), safe0);
        int p = p0, k = 0;
        for (; p < safe0; ++p, ++k) plane(edge, flag<true>(), p, k);
        // Three rounds unrolled: the below/centre/new planes rotate with period three,
        // so the unrolled rounds need no register moves.
#pragma unroll 3
        for (; p < safe1; ++p, ++k) plane(edge, flag<false>(), p, k);
        for (; p < end; ++p, ++k) plane(edge, flag<true>(), p, k);
    };
    if (edge_tile) {
        march(flag<true>());
    } else {
        march(flag<false>());
    }
    // Without TB3_PROBE the outputs' probe says only that the pass failed (its first step).
#pragma unroll
    for (int l = 0; l < (LEVEL_PROBES ? T : 0); ++l)
        if (!isfinite(probe[l])) bad_levels |= 1u << l;
    if (TB3_PROBE && bad_levels) atomicMin(bad, step + (u64)(__ffs(bad_levels) - 1));
    if (!TB3_PROBE && !isfinite(probe[0])) atomicMin(bad, step);
}
#endif
#endif

// Copy the halo layers of a box (n0 values from value 0 to kept + 0, n1 from value from1
// to kept + to1: the layers below and above the owned ones) if the pass of steps
// [first, end) failed (a pass reports its first step in *bad). A slab launches this
// once, ahead of the first kernel of the pass after a several-step pass, on that pass's
// input, whose halo the exchange after this pass overwrites: the failed pass is then
// replayed one step at a time from the copy. Unless a pass failed it returns at once;
// one launch for both halos, since each launch costs a pass a few microseconds.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_heat_rescue)
extern "C" __global__ void heat_rescue(const real* __restrict__ src, real* __restrict__ kept,
                                       u64 n0, u64 from1, u64 to1, u64 n1, u64 first,
                                       u64 end, const u64* __restrict__ bad) {
    const u64 b = ((volatile const u64*)bad)[0];
    if (b < first || b >= end) return;
    const u64 n = blockIdx.y ? n1 : n0;
    if (blockIdx.y) { src += from1; kept += to1; }
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
        kept[i] = src[i];
}
#endif

// Copy the region [z0,z1)×[y0,y1)×[x0,x1) between two boxes of the same shape.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_box_copy)
extern "C" __global__ void box_copy(const real* __restrict__ src, real* __restrict__ dst, int by,
                                    int bx, int z0, int z1, int y0, int y1, int x0, int x1) {
    const int x = x0 + blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= x1) return;
    const int height = y1 - y0;
    const int rows = (z1 - z0) * height;
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const size_t i = ((size_t)(z0 + row / height) * by + (y0 + row % height)) * bx + x;
        dst[i] = src[i];
    }
}
#endif
