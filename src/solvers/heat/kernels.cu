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

// One step inside a box of bz·by·bx values whose element 0 sits at global index
// (oz, oy, ox) of an nz·ny·nx grid: writes the region [z0,z1)×[y0,y1)×[x0,x1) of un from
// u. Grid-boundary points are copied (Dirichlet), the rest updated. The in-core engine is
// the box that is the whole grid; the pyramid shrinks the region by one per step on halo
// sides. Each thread marches MARCH points along the slowest real axis (z in 3D, y in 2D)
// keeping the previous, current and next values in registers, so memory sees about one
// read and one write per point. *bad holds the first step that produced a non-finite
// value (~0 while none has); once set, later launches return at once.
extern "C" __global__ void heat_box_step(const real* __restrict__ u, real* __restrict__ un,
                                         int bz, int by, int bx, int z0, int z1, int y0, int y1,
                                         int x0, int x1, int oz, int oy, int ox, int nz, int ny,
                                         int nx, int dims, real rz, real ry, real rx, u64 step,
                                         u64* __restrict__ bad) {
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const int x = x0 + blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= x1) return;
    const bool mz = dims != 2;  // march along z (3D; trivially in 1D), else along y
    const int m0 = mz ? z0 : y0, m1 = mz ? z1 : y1;
    const int o0 = mz ? y0 : z0, o1 = mz ? y1 : z1;
    const size_t ms = mz ? (size_t)by * bx : (size_t)bx;
    const int mext = mz ? bz : by;
    const int mg = mz ? oz : oy, mn = mz ? nz : ny;
    const bool mreal = mz ? dims >= 3 : true;
    const int ocount = o1 - o0, chunks = (m1 - m0 + MARCH - 1) / MARCH;
    const bool edge_x = ox + x == 0 || ox + x == nx - 1;
    bool finite = true;
    for (int b = blockIdx.y; b < ocount * chunks; b += gridDim.y) {
        const int o = o0 + b % ocount;
        const int s0 = m0 + (b / ocount) * MARCH, s1 = min(s0 + MARCH, m1);
        const int z = mz ? s0 : o, y = mz ? o : s0;
        const bool edge_o = mz && dims >= 2 && (oy + o == 0 || oy + o == ny - 1);
        size_t i = ((size_t)z * by + y) * bx + x;
        real cm = s0 > 0 ? u[i - ms] : (real)0;
        real cc = u[i];
#pragma unroll 4
        for (int m = s0; m < s1; ++m) {
            const real cp = m + 1 < mext ? u[i + ms] : cc;
            const bool edge = edge_x || edge_o || (mreal && (mg + m == 0 || mg + m == mn - 1));
            real v = cc;
            if (!edge) {
                real ym, yp, zm, zp;
                if (mz) {
                    zm = dims >= 3 ? cm : cc;
                    zp = dims >= 3 ? cp : cc;
                    ym = dims >= 2 ? u[i - bx] : cc;
                    yp = dims >= 2 ? u[i + bx] : cc;
                } else {
                    ym = cm;
                    yp = cp;
                    zm = cc;
                    zp = cc;
                }
                v = heat_update(cc, u[i - 1], u[i + 1], ym, yp, zm, zp, rx, ry, rz);
            }
            finite &= isfinite(v);
            un[i] = v;
            cm = cc;
            cc = cp;
            i += ms;
        }
    }
    if (!finite) atomicMin(bad, step);
}

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
