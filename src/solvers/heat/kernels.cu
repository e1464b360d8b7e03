// Explicit heat equation (FTCS), one step per launch, fields row-major (z, y, x), x fastest.
// Compiled with -Dreal=float|double. Keep update() in step with solvers/heat/cpu.rs.

__device__ __forceinline__ real heat_update(real c, real xm, real xp, real ym, real yp, real zm,
                                            real zp, real rx, real ry, real rz) {
    const real two = (real)2;
    return c + (rx * ((xm + xp) - two * c) + ry * ((ym + yp) - two * c) +
                rz * ((zm + zp) - two * c));
}

// Interior points only: both buffers start as the initial field, so boundary values stay.
// *bad holds the first step that produced a non-finite value (~0 while none has); once
// set, later launches return at once.
extern "C" __global__ void heat_step(const real* __restrict__ u, real* __restrict__ un, int nz,
                                     int ny, int nx, int dims, real rz, real ry, real rx,
                                     u64 step, u64* __restrict__ bad) {
    if (((volatile u64*)bad)[0] != ~0ull) return;
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < 1 || x > nx - 2) return;
    const size_t plane = (size_t)ny * nx;
    const int rows = nz * ny;
    bool finite = true;
    for (int row = blockIdx.y; row < rows; row += gridDim.y) {
        const int z = row / ny, y = row % ny;
        if (dims >= 2 && (y < 1 || y > ny - 2)) continue;
        if (dims >= 3 && (z < 1 || z > nz - 2)) continue;
        const size_t i = (size_t)row * nx + x;
        const real c = u[i];
        const real ym = dims >= 2 ? u[i - nx] : c, yp = dims >= 2 ? u[i + nx] : c;
        const real zm = dims >= 3 ? u[i - plane] : c, zp = dims >= 3 ? u[i + plane] : c;
        const real v = heat_update(c, u[i - 1], u[i + 1], ym, yp, zm, zp, rx, ry, rz);
        finite &= isfinite(v);
        un[i] = v;
    }
    if (!finite) atomicMin(bad, step);
}
