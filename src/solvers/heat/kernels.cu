// Explicit heat equation (FTCS), fields row-major (z, y, x), x fastest.
// Compiled with -Dreal=float|double. Keep heat_update() in step with solvers/heat/cpu.rs.

__device__ __forceinline__ real heat_update(real c, real xm, real xp, real ym, real yp, real zm,
                                            real zp, real rx, real ry, real rz) {
    const real two = (real)2;
    return c + (rx * ((xm + xp) - two * c) + ry * ((ym + yp) - two * c) +
                rz * ((zm + zp) - two * c));
}

// One step inside a box of by·bx rows per plane whose element 0 sits at global index
// (oz, oy, ox) of an nz·ny·nx grid: writes the region [z0,z1)×[y0,y1)×[x0,x1) of un from
// u. Grid-boundary points are copied (Dirichlet), the rest updated. The in-core engine is
// the box that is the whole grid; the pyramid shrinks the region by one per step on halo
// sides. *bad holds the first step that produced a non-finite value (~0 while none has);
// once set, later launches return at once.
extern "C" __global__ void heat_box_step(const real* __restrict__ u, real* __restrict__ un,
                                         int by, int bx, int z0, int z1, int y0, int y1, int x0,
                                         int x1, int oz, int oy, int ox, int nz, int ny, int nx,
                                         int dims, real rz, real ry, real rx, u64 step,
                                         u64* __restrict__ bad) {
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const int x = x0 + blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= x1) return;
    const size_t plane = (size_t)by * bx;
    const int height = y1 - y0;
    const int rows = (z1 - z0) * height;
    const bool edge_x = ox + x == 0 || ox + x == nx - 1;
    bool finite = true;
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const int z = z0 + row / height, y = y0 + row % height;
        const bool edge = edge_x || (dims >= 2 && (oy + y == 0 || oy + y == ny - 1)) ||
                          (dims >= 3 && (oz + z == 0 || oz + z == nz - 1));
        const size_t i = ((size_t)z * by + y) * bx + x;
        const real c = u[i];
        real v = c;
        if (!edge) {
            const real ym = dims >= 2 ? u[i - bx] : c, yp = dims >= 2 ? u[i + bx] : c;
            const real zm = dims >= 3 ? u[i - plane] : c, zp = dims >= 3 ? u[i + plane] : c;
            v = heat_update(c, u[i - 1], u[i + 1], ym, yp, zm, zp, rx, ry, rz);
        }
        finite &= isfinite(v);
        un[i] = v;
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
