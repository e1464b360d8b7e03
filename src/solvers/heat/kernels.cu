// Explicit heat equation (FTCS), fields row-major (z, y, x), x fastest.
// Compiled with -Dreal=float|double. Keep heat_update() in step with solvers/heat/cpu.rs.

__device__ __forceinline__ real heat_update(real c, real xm, real xp, real ym, real yp, real zm,
                                            real zp, real rx, real ry, real rz) {
    const real two = (real)2;
    return c + (rx * ((xm + xp) - two * c) + ry * ((ym + yp) - two * c) +
                rz * ((zm + zp) - two * c));
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

// Copy the region [z0,z1)×[y0,y1)×[x0,x1) between two boxes of the same shape.
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
