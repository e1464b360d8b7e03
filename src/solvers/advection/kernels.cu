// Cubic semi-Lagrangian advection, one step per launch (seed 000), compiled with
// -Dreal=float|double and ADV_BX threads per block.
//
// A thread owns column i of a tile of `rows` rows and walks down it. The x-interpolation
// of row r at column i needs f_{i-2..i+2} of that row and du of the output cell; its
// coefficients (c0..c3 of the u >= 0 branch and dif = c3p - c3m) do not depend on du, so
// each row's are computed once and serve the five output rows r-2..r+2 (five rows of
// coefficients ride in registers). The branch-free form of the study:
// f = fp - dif·d·(d² - 1)·[d > 0], fp the u >= 0 polynomial (Horner, as the CPU engine).
// Neighbouring columns come through L1 (each row's 5 loads hit the lines the warp's own
// loads bring in). Per cell and step, DRAM moves f in, f out, du and dv: 4 values.

#ifndef ADV_BX
#define ADV_BX 128
#endif

struct Coef { real c0, c1, c2, c3, dif; };

__device__ __forceinline__ Coef coef(real fm2, real fm1, real f0, real fp1, real fp2) {
    const real h = (real)0.5, s3 = (real)(1.0 / 3.0), s6 = (real)(1.0 / 6.0);
    Coef c;
    c.c0 = f0;
    c.c2 = h * fp1 - f0 + h * fm1;
    c.c3 = s6 * fp1 - h * f0 + h * fm1 - s6 * fm2;
    c.c1 = s3 * fp1 + h * f0 - fm1 + s6 * fm2;
    const real c3m = -(s6 * fm1) + h * f0 - h * fp1 + s6 * fp2;
    c.dif = c.c3 - c3m;
    return c;
}

__device__ __forceinline__ real eval(const Coef& c, real d) {
    const real fp = ((c.c3 * d + c.c2) * d + c.c1) * d + c.c0;
    const real corr = c.dif * d * (d * d - (real)1);
    return fp - (d > (real)0 ? corr : (real)0);
}

// Velocity source: 0 arrays du, dv; 1 uniform (a0, a1); 2 rotation du = a0 (j - a1),
// dv = -(a2 (i - a3)); 3 swirl: du = a0 sin²(πX) sin(2πY), dv = a1 sin²(πY) sin(2πX),
// X = i/nx, Y = j/ny (a0, a1 carry -Δt/Δx·Lx·cos(πt/T) and its y twin).
struct Velocity {
    const real* du; const real* dv;
    int mode; real a0, a1, a2, a3;
};

__device__ __forceinline__ void displacement(const Velocity& v, int i, int j, int nx, int ny,
                                             size_t n, real& a, real& b) {
    if (v.mode == 0) { a = v.du[n]; b = v.dv[n]; }
    else if (v.mode == 1) { a = v.a0; b = v.a1; }
    else if (v.mode == 2) { a = v.a0 * ((real)j - v.a1); b = -(v.a2 * ((real)i - v.a3)); }
    else {
        const real x = (real)i / (real)nx, y = (real)j / (real)ny;
        const real sx = sinpi(x), sy = sinpi(y);
        a = v.a0 * (sx * sx) * sinpi((real)2 * y);
        b = v.a1 * (sy * sy) * sinpi((real)2 * x);
    }
}

extern "C" __global__ void __launch_bounds__(ADV_BX)
adv_step(const real* __restrict__ f, real* __restrict__ g, const real* __restrict__ du,
         const real* __restrict__ dv, int mode, real a0, real a1, real a2, real a3, int nx,
         int ny, int rows, int periodic) {
    const int i = blockIdx.x * ADV_BX + threadIdx.x;
    if (i >= nx) return;
    const int j0 = blockIdx.y * rows, j1 = min(j0 + rows, ny);
    const Velocity vel = {du, dv, mode, a0, a1, a2, a3};
    int cx[5];
    for (int o = 0; o < 5; ++o) {
        const int c = i + o - 2;
        cx[o] = periodic ? (c + nx) % nx : min(max(c, 0), nx - 1);
    }
    const bool col = periodic || (i >= 2 && i < nx - 2);
    // Rows outside the grid: wrapped, or clamped (their coefficients then serve only
    // cells the contest boundary holds, which copy f).
    auto row_coef = [&](int r) {
        r = periodic ? (r + ny) % ny : min(max(r, 0), ny - 1);
        const real* fr = f + (size_t)r * nx;
        return coef(fr[cx[0]], fr[cx[1]], fr[cx[2]], fr[cx[3]], fr[cx[4]]);
    };
    Coef k0 = row_coef(j0 - 2), k1 = row_coef(j0 - 1), k2 = row_coef(j0), k3 = row_coef(j0 + 1);
    for (int j = j0; j < j1; ++j) {
        const Coef k4 = row_coef(j + 2);
        const size_t n = (size_t)j * nx + i;
        if (col && (periodic || (j >= 2 && j < ny - 2))) {
            real a, b;
            displacement(vel, i, j, nx, ny, n, a, b);
            const Coef cy = coef(eval(k0, a), eval(k1, a), eval(k2, a), eval(k3, a), eval(k4, a));
            g[n] = eval(cy, b);
        } else {
            g[n] = k2.c0;
        }
        k0 = k1; k1 = k2; k2 = k3; k3 = k4;
    }
}
