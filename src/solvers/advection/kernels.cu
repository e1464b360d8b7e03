// Cubic semi-Lagrangian advection, one step per launch (seed 000), compiled with
// -Dreal=float|double and ADV_BX threads per block.
//
// A thread owns ADV_COLS adjacent columns of a tile of `rows` rows and walks down them. The x-interpolation
// of row r at column i needs f_{i-2..i+2} of that row and du of the output cell; its
// coefficients (c0..c3 of the u >= 0 branch and dif = c3p - c3m) do not depend on du, so
// each row's are computed once and serve the five output rows r-2..r+2 (five rows of
// coefficients ride in registers). The branch-free form of the study:
// f = fp - dif·d·(d² - 1)·[d > 0], fp the u >= 0 polynomial in Horner form.
// Neighbouring columns come through L1 (each row's 5 loads hit the lines the warp's own
// loads bring in). Per cell and step, DRAM moves f in, f out, du and dv: 4 values.

#ifndef ADV_BX
#define ADV_BX 128
#endif
// The velocity source (below) and the boundary (1: periodic, 0: the contest's), fixed at
// compile time so each engine's kernel carries only its own path.
#ifndef ADV_MODE
#define ADV_MODE 0
#endif
#ifndef ADV_PERIODIC
#define ADV_PERIODIC 0
#endif

struct Coef { real c0, c1, c2, c3, dif; };

// The combinations are written with explicit fma() (the build contracts nothing else),
// so every kernel that uses them rounds alike: multi-step passes equal single steps.
__device__ __forceinline__ Coef coef(real fm2, real fm1, real f0, real fp1, real fp2) {
    const real h = (real)0.5, s3 = (real)(1.0 / 3.0), s6 = (real)(1.0 / 6.0);
    Coef c;
    c.c0 = f0;
    c.c2 = fma(h, fp1 + fm1, -f0);
    c.c3 = fma(s6, fp1 - fm2, h * (fm1 - f0));
    c.c1 = fma(s3, fp1, fma(h, f0, fma(s6, fm2, -fm1)));
    const real c3m = fma(s6, fp2 - fm1, h * (f0 - fp1));
    c.dif = c.c3 - c3m;
    return c;
}

// d and d·(d² − 1), once per output cell and axis.
struct Offset { real d, w; bool m; };

__device__ __forceinline__ Offset offset(real d) {
    Offset o;
    o.d = d;
    o.w = d * fma(d, d, (real)-1);
    o.m = d > (real)0;
    return o;
}

__device__ __forceinline__ real eval(const Coef& c, const Offset& o) {
    const real fp = fma(fma(fma(c.c3, o.d, c.c2), o.d, c.c1), o.d, c.c0);
    return fma(-(o.m ? c.dif : (real)0), o.w, fp);
}

// Velocity source: 0 arrays du, dv; 1 uniform (a0, a1); 2 rotation du = a0 (j - a1),
// dv = -(a2 (i - a3)); 3 swirl: du = a0 sin²(πX) sin(2πY), dv = a1 sin²(πY) sin(2πX),
// X = i/nx, Y = j/ny (a0, a1 carry -Δt/Δx·Lx·cos(πt/T) and its y twin).
struct Velocity {
    const real* du; const real* dv;
    real a0, a1, a2, a3;
};

__device__ __forceinline__ void displacement(const Velocity& v, int i, int j, int nx, int ny,
                                             size_t n, real& a, real& b) {
    if (ADV_MODE == 0) { a = v.du[n]; b = v.dv[n]; }
    else if (ADV_MODE == 1) { a = v.a0; b = v.a1; }
    else if (ADV_MODE == 2) { a = v.a0 * ((real)j - v.a1); b = -(v.a2 * ((real)i - v.a3)); }
    else {
        const real x = (real)i / (real)nx, y = (real)j / (real)ny;
        const real sx = sinpi(x), sy = sinpi(y);
        a = v.a0 * (sx * sx) * sinpi((real)2 * y);
        b = v.a1 * (sy * sy) * sinpi((real)2 * x);
    }
}

// Slabs (src/parallel): a buffer holds rows base .. base + nbuf − 1 of the grid (a
// periodic slab's halo rows keep unwrapped numbers, so base may be negative) and a launch
// writes the rows jw0 .. jw1 − 1. The buffer row of grid row r: r − base where the buffer
// has it, else r wrapped (periodic: the whole grid is in the buffer) or clamped (the
// contest's held rows, whose values only feed cells that copy f).
__device__ __forceinline__ int buffer_row(int r, int base, int nbuf, int ny) {
    int l = r - base;
    if (l < 0 || l >= nbuf) {
        r = ADV_PERIODIC ? (r % ny + ny) % ny : min(max(r, 0), ny - 1);
        l = r - base;
    }
    return l;
}

// The grid row (0 .. ny − 1) that row r stands for: the velocity's and the boundary's j.
__device__ __forceinline__ int grid_row(int r, int ny) {
    return ADV_PERIODIC ? (r % ny + ny) % ny : min(max(r, 0), ny - 1);
}

// Blocks per SM the compiler must fit (caps registers per thread).
#ifndef ADV_MINB
#define ADV_MINB 1
#endif

// Columns per thread: the row's loads, index arithmetic and loop serve ADV_COLS cells.
#ifndef ADV_COLS
#define ADV_COLS 2
#endif

// Coefficients of one row for a thread's ADV_COLS columns.
struct RowCoef { Coef c[ADV_COLS]; };

extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_MINB)
adv_step(const real* __restrict__ f_pad, real* __restrict__ g_pad, const real* __restrict__ du,
         const real* __restrict__ dv, real a0, real a1, real a2, real a3, int nx, int ny,
         int base, int nbuf, int jw0, int jw1, int rows) {
    constexpr int C = ADV_COLS;
    const bool periodic = ADV_PERIODIC;
    const real* f = f_pad + 2;
    real* g = g_pad + 2;
    const int i0 = C * (blockIdx.x * ADV_BX + threadIdx.x);
    if (i0 >= nx) return;
    const int j0 = jw0 + blockIdx.y * rows, j1 = min(j0 + rows, jw1);
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    // Periodic columns i0-2 .. i0+C+1, wrapped.
    int cx[C + 4];
    for (int o = 0; o < C + 4; ++o) cx[o] = periodic ? (i0 + o - 2 + 2 * nx) % nx : 0;
    bool col[C];
    for (int c = 0; c < C; ++c) {
        const int i = i0 + c;
        col[c] = i < nx && (periodic || (i >= 2 && i < nx - 2));
    }
    // Rows outside the grid: wrapped, or clamped (their coefficients then serve only
    // cells the contest boundary holds, which copy f). Contest boundary: the columns at
    // fixed offsets from one pointer; the buffers are padded (2 values before, 8 after:
    // cuda.rs) so the boundary columns' reads, up to C+1 past the row, stay inside.
    auto row_coef = [&](int r) {
        const real* fr = f + (size_t)buffer_row(r, base, nbuf, ny) * nx;
        real v[C + 4];
        if (periodic) {
            for (int o = 0; o < C + 4; ++o) v[o] = fr[cx[o]];
        } else {
            const real* q = fr + i0;
            for (int o = 0; o < C + 4; ++o) v[o] = q[o - 2];
        }
        RowCoef k;
        for (int c = 0; c < C; ++c) k.c[c] = coef(v[c], v[c + 1], v[c + 2], v[c + 3], v[c + 4]);
        return k;
    };
    RowCoef k0 = row_coef(j0 - 2), k1 = row_coef(j0 - 1), k2 = row_coef(j0), k3 = row_coef(j0 + 1);
#pragma unroll 5
    for (int j = j0; j < j1; ++j) {
        const RowCoef k4 = row_coef(j + 2);
        const bool row = periodic || (j >= 2 && j < ny - 2);
        for (int c = 0; c < C; ++c) {
            const int i = i0 + c;
            const size_t n = (size_t)(j - base) * nx + i;
            if (col[c] && row) {
                real a, b;
                displacement(vel, i, j, nx, ny, n, a, b);
                const Offset x = offset(a), y = offset(b);
                const Coef cy = coef(eval(k0.c[c], x), eval(k1.c[c], x), eval(k2.c[c], x),
                                     eval(k3.c[c], x), eval(k4.c[c], x));
                g[n] = eval(cy, y);
            } else if (i < nx) {
                g[n] = k2.c[c].c0;
            }
        }
        k0 = k1; k1 = k2; k2 = k3; k3 = k4;
    }
}

// Several steps per pass (temporal blocking): a block loads its tile of f with a halo of
// 2·ADV_STEPS cells into shared memory, takes ADV_STEPS steps there (step s updates the
// tile grown by 2·(ADV_STEPS − s) cells, so each step's stencil reads only what the step
// before wrote), and writes the tile. DRAM moves f in and out once per pass; du, dv come
// through L1/L2 each step (the same lines every step). Each cell's arithmetic is
// adv_step's (coef, eval, offset: the same fma), so a pass equals single steps bit for
// bit. Threads own ADV_COLS adjacent columns of the grown tile and walk down them, reusing
// each row's coefficients for five outputs. Steady velocities only (arrays, uniform, rotation).
#ifndef ADV_STEPS
#define ADV_STEPS 2
#endif
#ifndef ADV_TY
#define ADV_TY 16
#endif
#define ADV_H (2 * ADV_STEPS)
// Tile width: the first step's grown tile is ADV_COLS columns per thread (every step's
// grown width is then a multiple of ADV_COLS when ADV_COLS divides 4).
#define ADV_TX (ADV_COLS * ADV_BX - 4 * (ADV_STEPS - 1))
#define ADV_W (ADV_TX + 2 * ADV_H)
#define ADV_R (ADV_TY + 2 * ADV_H)

extern "C" __global__ void __launch_bounds__(ADV_BX)
adv_pass(const real* __restrict__ f_pad, real* __restrict__ g_pad, const real* __restrict__ du,
         const real* __restrict__ dv, real a0, real a1, real a2, real a3, int nx, int ny,
         int base, int nbuf, int jw0, int jw1, int rows) {
    // rows: the tile's, ADV_TY (adv_step's argument list, so one launch serves both).
    extern __shared__ unsigned char adv_smem[];
    real* buf0 = (real*)adv_smem;
    real* buf1 = buf0 + ADV_W * ADV_R;
    const bool periodic = ADV_PERIODIC;
    const real* f = f_pad + 2;
    real* g = g_pad + 2;
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    // Grid position of buffer cell (0, 0).
    const int x0 = blockIdx.x * ADV_TX - ADV_H, y0 = jw0 + blockIdx.y * ADV_TY - ADV_H;
    auto gx = [&](int c) { const int x = x0 + c; return periodic ? (x % nx + nx) % nx : min(max(x, 0), nx - 1); };
    auto by = [&](int r) { return buffer_row(y0 + r, base, nbuf, ny); };
    for (int t = threadIdx.x; t < ADV_W * ADV_R; t += ADV_BX) {
        const int r = t / ADV_W, c = t % ADV_W;
        buf0[t] = f[(size_t)by(r) * nx + gx(c)];
    }
    __syncthreads();
    real* src = buf0;
    real* dst = buf1;
    for (int s = 1; s <= ADV_STEPS; ++s) {
        const int h = 2 * (ADV_STEPS - s);
        const int c0 = ADV_H - h, c1 = ADV_H + ADV_TX + h, r0 = ADV_H - h, r1 = ADV_H + ADV_TY + h;
        constexpr int C = ADV_COLS;
        for (int c = c0 + C * threadIdx.x; c < c1; c += C * ADV_BX) {
            auto row_coef = [&](int r) {
                const real* q = src + r * ADV_W + c;
                real v[C + 4];
                for (int o = 0; o < C + 4; ++o) v[o] = q[o - 2];
                RowCoef k;
                for (int m = 0; m < C; ++m) k.c[m] = coef(v[m], v[m + 1], v[m + 2], v[m + 3], v[m + 4]);
                return k;
            };
            RowCoef k0 = row_coef(r0 - 2), k1 = row_coef(r0 - 1), k2 = row_coef(r0),
                    k3 = row_coef(r0 + 1);
#pragma unroll 5
            for (int r = r0; r < r1; ++r) {
                const RowCoef k4 = row_coef(r + 2);
                const int y = y0 + r;
                const bool row = periodic || (y >= 2 && y < ny - 2);
                for (int m = 0; m < C; ++m) {
                    const int x = x0 + c + m;
                    real out = k2.c[m].c0;
                    if (row && (periodic || (x >= 2 && x < nx - 2))) {
                        const int i = gx(c + m), j = grid_row(y, ny);
                        real a, b;
                        displacement(vel, i, j, nx, ny, (size_t)by(r) * nx + i, a, b);
                        const Offset ox = offset(a), oy = offset(b);
                        const Coef cy = coef(eval(k0.c[m], ox), eval(k1.c[m], ox), eval(k2.c[m], ox),
                                             eval(k3.c[m], ox), eval(k4.c[m], ox));
                        out = eval(cy, oy);
                    }
                    dst[r * ADV_W + c + m] = out;
                }
                k0 = k1; k1 = k2; k2 = k3; k3 = k4;
            }
        }
        __syncthreads();
        real* tmp = src; src = dst; dst = tmp;
    }
    for (int t = threadIdx.x; t < ADV_TX * ADV_TY; t += ADV_BX) {
        const int r = ADV_H + t / ADV_TX, c = ADV_H + t % ADV_TX;
        const int x = x0 + c, y = y0 + r;
        if (x < nx && y < jw1) g[(size_t)(y - base) * nx + x] = src[r * ADV_W + c];
    }
}
