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

// Values before the grid's first cell in f and g (the engine's pad()).
#ifndef ADV_PAD
#define ADV_PAD 2
#endif
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
// The grid row or column (0 .. n − 1) that index k stands for, wrapped (periodic) or
// clamped (the contest's held cells): the velocity's and the boundary's j or i.
__device__ __forceinline__ int grid_index(int k, int n) {
    return ADV_PERIODIC ? (k % n + n) % n : min(max(k, 0), n - 1);
}

// The buffer row of grid row r: where the buffer holds it, else where its wrapped or
// clamped grid row lies (the whole grid's buffer holds every row), else the nearest
// buffer row. The last case is a slab's tile hanging past its halo: the cells computed
// from those rows lie outside the rows the launch writes, so any row in the buffer
// serves, and none outside it may be read (on a second GPU such a read faulted).
__device__ __forceinline__ int buffer_row(int r, int base, int nbuf, int ny) {
    const int l = r - base;
    if (l >= 0 && l < nbuf) return l;
    const int w = grid_index(r, ny) - base;
    if (w >= 0 && w < nbuf) return w;
    return min(max(l, 0), nbuf - 1);
}

// Blocks per SM the compiler must fit (caps registers per thread).
#ifndef ADV_MINB
#define ADV_MINB 1
#endif

// Columns per thread: the row's loads, index arithmetic and loop serve ADV_COLS cells.
#ifndef ADV_COLS
#define ADV_COLS 2
#endif

// The parameters of every kernel here (cuda.rs launches them alike): the padded fields,
// du and dv (arrays mode), the velocity coefficients, the grid, the buffer's rows
// (base, nbuf), the rows to write (jw0 .. jw1) and the rows per tile.
#define ADV_PARAMS                                                                            \
    const real *__restrict__ f_pad, real *__restrict__ g_pad, const real *__restrict__ du,   \
        const real *__restrict__ dv, real a0, real a1, real a2, real a3, int nx, int ny,      \
        int base, int nbuf, int jw0, int jw1, int rows

// Coefficients of one row for a thread's ADV_COLS columns.
struct RowCoef { Coef c[ADV_COLS]; };

// A thread's ADV_COLS columns of the single-step tiles: the first, which ones are computed
// (the contest holds its outer two), and the periodic columns i0-2 .. i0+C+1, wrapped.
struct StepColumns {
    int i0;
    int cx[ADV_COLS + 4];
    bool col[ADV_COLS];
};

__device__ __forceinline__ StepColumns step_columns(int nx) {
    StepColumns s;
    s.i0 = ADV_COLS * (blockIdx.x * ADV_BX + threadIdx.x);
    for (int o = 0; o < ADV_COLS + 4; ++o) s.cx[o] = ADV_PERIODIC ? (s.i0 + o - 2 + 2 * nx) % nx : 0;
    for (int c = 0; c < ADV_COLS; ++c) {
        const int i = s.i0 + c;
        s.col[c] = i < nx && (ADV_PERIODIC || (i >= 2 && i < nx - 2));
    }
    return s;
}

// Row r's values at the thread's columns i0-2 .. i0+C+1. Rows outside the grid: wrapped,
// or clamped (they then serve only cells the contest boundary holds, which copy f).
// Contest boundary: the columns at fixed offsets from one pointer; the buffers are padded
// (2 values before, 8 after: cuda.rs) so the boundary columns' reads, up to C+1 past the
// row, stay inside.
struct RowVals { real v[ADV_COLS + 4]; };

__device__ __forceinline__ RowVals step_row(const real* f, const StepColumns& s, int r, int base,
                                            int nbuf, int nx, int ny) {
    const real* fr = f + (size_t)buffer_row(r, base, nbuf, ny) * nx;
    RowVals k;
    if (ADV_PERIODIC) {
        for (int o = 0; o < ADV_COLS + 4; ++o) k.v[o] = fr[s.cx[o]];
    } else {
        const real* q = fr + s.i0;
        for (int o = 0; o < ADV_COLS + 4; ++o) k.v[o] = q[o - 2];
    }
    return k;
}

// A row's coefficients at the thread's ADV_COLS columns from its values there (columns
// i0-2 .. i0+C+1).
__device__ __forceinline__ RowCoef row_coefs(const RowVals& v) {
    RowCoef k;
    for (int c = 0; c < ADV_COLS; ++c)
        k.c[c] = coef(v.v[c], v.v[c + 1], v.v[c + 2], v.v[c + 3], v.v[c + 4]);
    return k;
}

// The general form's new value of the thread's column c: x on the five rows' coefficients
// at the cell's displacement a, then y at b. Every general-form kernel computes a cell
// here, so passes and single steps round alike.
__device__ __forceinline__ real general_cell(const RowCoef& k0, const RowCoef& k1,
                                             const RowCoef& k2, const RowCoef& k3,
                                             const RowCoef& k4, int c, real a, real b) {
    const Offset x = offset(a), y = offset(b);
    const Coef cy = coef(eval(k0.c[c], x), eval(k1.c[c], x), eval(k2.c[c], x),
                         eval(k3.c[c], x), eval(k4.c[c], x));
    return eval(cy, y);
}

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_step)
extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_MINB)
adv_step(ADV_PARAMS) {
    constexpr int C = ADV_COLS;
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const StepColumns sc = step_columns(nx);
    const int i0 = sc.i0;
    if (i0 >= nx) return;
    const int j0 = jw0 + blockIdx.y * rows, j1 = min(j0 + rows, jw1);
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    auto row_coef = [&](int r) { return row_coefs(step_row(f, sc, r, base, nbuf, nx, ny)); };
    RowCoef k0 = row_coef(j0 - 2), k1 = row_coef(j0 - 1), k2 = row_coef(j0), k3 = row_coef(j0 + 1);
#pragma unroll 5
    for (int j = j0; j < j1; ++j) {
        const RowCoef k4 = row_coef(j + 2);
        const bool row = ADV_PERIODIC || (j >= 2 && j < ny - 2);
        for (int c = 0; c < C; ++c) {
            const int i = i0 + c;
            const size_t n = (size_t)(j - base) * nx + i;
            if (sc.col[c] && row) {
                real a, b;
                displacement(vel, i, j, nx, ny, n, a, b);
                g[n] = general_cell(k0, k1, k2, k3, k4, c, a, b);
            } else if (i < nx) {
                g[n] = k2.c[c].c0;
            }
        }
        k0 = k1; k1 = k2; k2 = k3; k3 = k4;
    }
}
#endif

// Several steps per pass (temporal blocking; adv_pass and adv_pass_sep below): a block
// computes a tile of ADV_TY rows by ADV_TX columns, ADV_STEPS steps at once, from the tile
// grown by a halo of ADV_H = 2·ADV_STEPS cells (buffer cell (0, 0) at grid column x0, row
// y0).
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

// Pairs of reals (8- or 16-byte accesses) for tile rows that start at even offsets.
template <typename T> struct Vec2;
template <> struct Vec2<float> { typedef float2 type; };
template <> struct Vec2<double> { typedef double2 type; };
typedef Vec2<real>::type real2;

// Separable presets (uniform, rotation: ADV_MODE 1, 2): du depends on the row only and dv
// on the column only, so the interpolation weights of a row (x) and of a column (y) serve
// every cell that shares them. The cubic through the study's four upwind points (d <= 0:
// i-2 .. i+1; d > 0: i-1 .. i+2) is the same polynomial as its Horner form above, written
// as the Lagrange weights w of its four points and s, the stencil's start among the five
// values i-2 .. i+2 (0: i-2, 1: i-1). A cell then costs 4 × 4 + 4 multiply-adds on raw
// values (x on the four rows of the column's stencil, then y; 5 × 4 + 4 where the tile's
// columns start their stencils differently) instead of a row's coefficients, six Horner
// evaluations and the y coefficients (≈ 64 operations). The weights are exact at d = -1,
// 0, 1, so whole-cell shifts stay exact. Every separable kernel takes x and y as the same
// 4-term sums (apply4): a pass equals single steps bit for bit.
struct __align__(16) Lagrange { real w[4]; real s; };

// The four weights of the stencil that starts at its first point, at t in [-1, 0] (the
// position relative to its third point).
__device__ __forceinline__ void lagrange4(real t, real& a, real& b, real& c, real& e) {
    const real s6 = (real)(1.0 / 6.0), h = (real)0.5;
    const real p = fma(t, t, -t);                 // t (t - 1)
    const real q = fma(t, t + (real)3, (real)2);  // (t + 1)(t + 2)
    // Each weight's constant inside a multiply-add: 11 operations, not 14.
    a = p * fma(t, -s6, -s6);
    b = p * fma(t, h, (real)1);
    c = q * fma(t, -h, h);
    e = q * (t * s6);
}

__device__ __forceinline__ Lagrange lagrange(real d) {
    const bool m = d > (real)0;
    Lagrange l;
    lagrange4(m ? d - (real)1 : d, l.w[0], l.w[1], l.w[2], l.w[3]);
    l.s = m ? (real)1 : (real)0;
    return l;
}

// The stencil's weights on the five values v[0 .. 4] (i-2 .. i+2). S: its start when the
// caller knows it (0, 1), else 2: the values picked by l.s (selects, no branch: a warp's
// columns may start their y stencils differently). Every separable kernel takes x and y
// this way, so they round alike.
template <int S>
__device__ __forceinline__ real apply4(const Lagrange& l, const real* v) {
    if (S == 2) {
        const bool m = l.s != (real)0;
        const real u[4] = {m ? v[1] : v[0], m ? v[2] : v[1], m ? v[3] : v[2], m ? v[4] : v[3]};
        return apply4<0>(l, u);
    }
    constexpr int o = S == 1 ? 1 : 0;
    return fma(l.w[3], v[o + 3], fma(l.w[2], v[o + 2], fma(l.w[1], v[o + 1], l.w[0] * v[o])));
}

// The displacements of the separable presets: displacement()'s formulas, by row and column.
__device__ __forceinline__ real du_of_row(const Velocity& v, int j) {
    return ADV_MODE == 2 ? v.a0 * ((real)j - v.a1) : v.a0;
}
__device__ __forceinline__ real dv_of_col(const Velocity& v, int i) {
    return ADV_MODE == 2 ? -(v.a2 * ((real)i - v.a3)) : v.a1;
}

// A thread's ADV_COLS cells of one output row from the five rows' values (k[r].v[0 ..
// C+3]: columns i0-2 .. i0+C+1): x on the rows of the column's y stencil with the row's
// weights, then y with the column's. XS: the row's stencil start when the caller knows it
// (0, 1), else 2: a branch on it, uniform over the warp (every thread is on the same row).
// YS 0: k[0 .. 3] are the rows of the columns' y stencil (the caller's window starts where
// they do); YS 2: k holds all five (x on each, y picks four).
template <int XS, int YS>
__device__ __forceinline__ void separable_row(const Lagrange& x, const Lagrange* y,
                                              const RowVals* k, real* out) {
    static_assert(YS == 0 || YS == 2, "the window's rows: the stencil's four, or all five");
    constexpr int rows = YS == 0 ? 4 : 5;
    for (int m = 0; m < ADV_COLS; ++m) {
        real r[5] = {};
        if (XS == 0 || (XS == 2 && x.s == (real)0)) {
            for (int j = 0; j < rows; ++j) r[j] = apply4<0>(x, k[j].v + m);
        } else {
            for (int j = 0; j < rows; ++j) r[j] = apply4<1>(x, k[j].v + m);
        }
        out[m] = apply4<YS>(y[m], r);
    }
}

// adv_step for the separable presets: the same tiles and walk, raw row values in the
// five-row window instead of coefficients, y weights once per column, x weights once per
// row.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_step_sep)
extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_MINB)
adv_step_sep(ADV_PARAMS) {
    constexpr int C = ADV_COLS;
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const StepColumns sc = step_columns(nx);
    const int i0 = sc.i0;
    if (i0 >= nx) return;
    const int j0 = jw0 + blockIdx.y * rows, j1 = min(j0 + rows, jw1);
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    Lagrange wy[C];
    for (int c = 0; c < C; ++c) wy[c] = lagrange(dv_of_col(vel, i0 + c));
    auto row_vals = [&](int r) { return step_row(f, sc, r, base, nbuf, nx, ny); };
    RowVals k[5] = {row_vals(j0 - 2), row_vals(j0 - 1), row_vals(j0), row_vals(j0 + 1)};
#pragma unroll 5
    for (int j = j0; j < j1; ++j) {
        k[4] = row_vals(j + 2);
        const bool row = ADV_PERIODIC || (j >= 2 && j < ny - 2);
        real out[C];
        separable_row<2, 2>(lagrange(du_of_row(vel, j)), wy, k, out);
        for (int c = 0; c < C; ++c) {
            const int i = i0 + c;
            const size_t n = (size_t)(j - base) * nx + i;
            if (sc.col[c] && row) g[n] = out[c];
            else if (i < nx) g[n] = k[2].v[c + 2];
        }
        for (int r = 0; r < 4; ++r) k[r] = k[r + 1];
    }
}
#endif

// One step of a separable pass: the rows and columns of the tile grown by h (step s of
// ADV_STEPS: h = 2·(ADV_STEPS − s)), each thread ADV_COLS columns walked down the rows.
// load(c, r): the RowVals of tile row r at columns c−2 .. c+C+1; store(c, r, out): the
// thread's results of row r. CHECK: the tile touches the contest's held cells, so each
// cell asks; tiles clear of them (almost all) skip the test. XS: as separable_row's. YS 0:
// every column's y stencil starts at oy (0, 1), so the walk keeps the four rows of that
// stencil, r − 2 + oy .. r + 1 + oy, and takes x on them only; one code for both starts
// (a compile-time start would put two codes on the rotation's tile rows, whose tiles
// lie on both sides of its centre column: 517 against 491 ms, contest 5, H100). YS 2:
// the five rows r − 2 .. r + 2.
template <bool CHECK, int XS, int YS, class Load, class Store>
__device__ __forceinline__ void separable_step(int h, const Lagrange* wxs, const Velocity& vel,
                                               int x0, int y0, int nx, int ny, int oy,
                                               Load load, Store store) {
    constexpr int C = ADV_COLS;
    const int c0 = ADV_H - h, c1 = ADV_H + ADV_TX + h, r0 = ADV_H - h, r1 = ADV_H + ADV_TY + h;
    const int c = c0 + C * threadIdx.x;
    if (c >= c1) return;
    bool col[C];
    Lagrange wy[C];
    for (int m = 0; m < C; ++m) {
        const int x = x0 + c + m;
        col[m] = !CHECK || ADV_PERIODIC || (x >= 2 && x < nx - 2);
        wy[m] = lagrange(dv_of_col(vel, grid_index(x, nx)));
    }
    if (YS == 0) {
        static_assert(YS != 0 || !CHECK, "a tile with held cells walks five rows");
        RowVals k[4] = {load(c, r0 - 2 + oy), load(c, r0 - 1 + oy), load(c, r0 + oy)};
        // By the window's period; a step's row count (ADV_TY + 2h) need not be a multiple
        // of it (the default tile heights and their timings: cuda.rs, pass_shape).
#pragma unroll 4
        for (int r = r0; r < r1; ++r) {
            k[3] = load(c, r + 1 + oy);
            real out[C];
            separable_row<XS, 0>(wxs[r], wy, k, out);
            store(c, r, out);
            for (int j = 0; j < 3; ++j) k[j] = k[j + 1];
        }
        return;
    }
    RowVals k[5] = {load(c, r0 - 2), load(c, r0 - 1), load(c, r0), load(c, r0 + 1)};
#pragma unroll 5
    for (int r = r0; r < r1; ++r) {
        k[4] = load(c, r + 2);
        real out[C];
        separable_row<XS, YS>(wxs[r], wy, k, out);
        if (CHECK) {
            const int y = y0 + r;
            const bool row = ADV_PERIODIC || (y >= 2 && y < ny - 2);
            for (int m = 0; m < C; ++m) out[m] = row && col[m] ? out[m] : k[2].v[m + 2];
        }
        store(c, r, out);
        for (int j = 0; j < 4; ++j) k[j] = k[j + 1];
    }
}

// C + 4 values from q, in pairs where C is even (q then lies at an even offset).
__device__ __forceinline__ RowVals row_pairs(const real* q) {
    RowVals k;
    if (ADV_COLS % 2 == 0) {
        for (int o = 0; o < (ADV_COLS + 4) / 2; ++o) {
            const real2 u = ((const real2*)q)[o];
            k.v[2 * o] = u.x;
            k.v[2 * o + 1] = u.y;
        }
    } else {
        for (int o = 0; o < ADV_COLS + 4; ++o) k.v[o] = q[o];
    }
    return k;
}

// N (even) values to q (aligned to a pair) in pairs.
template <int N>
__device__ __forceinline__ void store_in_pairs(real* q, const real* out) {
#pragma unroll
    for (int m = 0; m < N; m += 2) {
        real2 u;
        u.x = out[m];
        u.y = out[m + 1];
        *(real2*)(q + m) = u;
    }
}

// Four f32 values to q (8 bytes past a 16-byte boundary) in two 8-byte stores, the pair
// at q + 2 first where `swap`. A half-warp's groups lie 16 bytes apart, so its first
// stores would use the banks 4k + 2 and 4k + 3 only, each twice; with the lanes whose
// group index has bit 3 set swapping, they use all 32 banks, one wavefront a store instead
// of two (ncu: 11.1 M excess wavefronts a pass before; contest 5, 2048 steps, H100: 582,
// 584 ms against 592). Other types and counts store in pairs.
template <int N>
__device__ __forceinline__ void store_in_pairs_spread(real* q, const real* out, bool swap) {
    if (N == 4 && sizeof(real) == 4) {
        const int o = swap ? 2 : 0;
        real2 u, w;
        u.x = swap ? out[2] : out[0];
        u.y = swap ? out[3] : out[1];
        w.x = swap ? out[0] : out[2];
        w.y = swap ? out[1] : out[3];
        *(real2*)(q + o) = u;
        *(real2*)(q + (2 - o)) = w;
    } else {
        store_in_pairs<N>(q, out);
    }
}

__device__ __forceinline__ void store_pairs(real* q, const real* out) {
    if (ADV_COLS % 2 == 0) {
        // (An even count also where ADV_COLS is odd: the branch is compiled regardless.)
        store_in_pairs<ADV_COLS - ADV_COLS % 2>(q, out);
    } else {
        for (int m = 0; m < ADV_COLS; ++m) q[m] = out[m];
    }
}

// The steps of a pass: step(h, load, store) computes the tile grown by h (load and store as
// in separable_step). The first step reads f where it lies (through L1: a thread's row
// values overlap its neighbours'), the middle ones go from buffer to buffer in shared
// memory, the last writes g. DIRECT: the tile lies inside the grid's columns and the
// buffer's rows (on an even nx where rows are read in pairs), so the first step reads at
// fixed offsets from one pointer; the other tiles wrap or clamp each value. Against a tile
// copied to shared memory first and out at the end (until 2026-11-24), this saves both
// copies and one of the two buffers at 2 steps (contest 5, velocity in the kernel: 0.609
// against 0.711 s).
#ifndef ADV_PF
#define ADV_PF 0
#endif
// Lanes per 32-byte sector of a first-step row, less one (a lane reads ADV_COLS values).
#define ADV_PF_LANES (32 / (ADV_COLS * (int)sizeof(real)) > 1 ? 32 / (ADV_COLS * (int)sizeof(real)) - 1 : 0)
template <bool DIRECT, class Step>
__device__ __forceinline__ void tile_pass(real* buf0, real* buf1, const real* f, real* g, int x0,
                                          int y0, int nx, int ny, int base, int nbuf, int jw1,
                                          Step step) {
    constexpr int C = ADV_COLS;
    const real* f0 = f + (size_t)(y0 - base) * nx + x0 - 2;
    auto from_f = [&](int c, int r) {
        // ADV_PF rows ahead, one lane per 32-byte sector asks L2 for the row: the walk's
        // loads then wait on L2, not DRAM (the separable pass, latency-bound on these
        // loads: contest 5 0.574 -> 0.505 s at 4 rows ahead; the general pass, bound by
        // instructions, loses: 1.715 -> 1.84 s).
        if (DIRECT && ADV_PF > 0 && (threadIdx.x & ADV_PF_LANES) == 0 && r + ADV_PF < ADV_R)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(f0 + (size_t)(r + ADV_PF) * nx + c));
        if (DIRECT) return row_pairs(f0 + (size_t)r * nx + c);
        const real* fr = f + (size_t)buffer_row(y0 + r, base, nbuf, ny) * nx;
        RowVals k;
        for (int o = 0; o < C + 4; ++o) k.v[o] = fr[grid_index(x0 + c - 2 + o, nx)];
        return k;
    };
    // Rows below jw1 and columns below nx (pairs on an even nx lie wholly inside or out).
    auto to_g = [&](int c, int r, const real* out) {
        const int y = y0 + r, x = x0 + c;
        if (y >= jw1) return;
        real* q = g + (size_t)(y - base) * nx + x;
        if (C % 2 == 0 && (nx & 1) == 0) {
            if (x < nx) store_pairs(q, out);
        } else {
            for (int m = 0; m < C; ++m)
                if (x + m < nx) q[m] = out[m];
        }
    };
    // Each step writes dst and hands it on as the next one's src: the first writes buf0.
    real* src = buf1;
    real* dst = buf0;
#pragma unroll
    for (int s = 1; s <= ADV_STEPS; ++s) {
        const int h = 2 * (ADV_STEPS - s);
        auto from_buf = [&](int c, int r) { return row_pairs(src + r * ADV_W + c - 2); };
        auto to_buf = [&](int c, int r, const real* out) { store_pairs(dst + r * ADV_W + c, out); };
        if (s == 1 && s == ADV_STEPS) step(h, from_f, to_g);
        else if (s == 1) step(h, from_f, to_buf);
        else if (s == ADV_STEPS) step(h, from_buf, to_g);
        else step(h, from_buf, to_buf);
        if (s < ADV_STEPS) __syncthreads();
        real* tmp = src; src = dst; dst = tmp;
    }
}

// Whether a tile (buffer cell (0, 0) at grid column x0, row y0) lies inside the buffer's
// rows and, unless the padding takes its halo columns, the grid's columns, on an even nx
// where its rows are read in pairs. With the contest's boundary a side tile's halo
// columns (x < 0 or x >= nx: the row before's or after's values, or the padding) feed
// only cells outside the grid or in its two held columns, which keep their values, so
// the tile may read them where they lie when they lie in the allocation.
// The first step reads a row's columns x0 − 2 .. x0 + ADV_W + ADV_COLS at most; past
// the grid's right side they run into the next row, and past the buffer's last row into
// the padding after it, which must hold them (a 61-column grid's tiles of 128 columns did
// not: memcheck, 2026-11-26).
#ifndef ADV_PAD_AFTER
#define ADV_PAD_AFTER (ADV_PAD + 8)
#endif
__device__ __forceinline__ bool tile_direct(int x0, int y0, int nx, int base, int nbuf) {
    const int l0 = y0 - base;
    constexpr bool padded = !ADV_PERIODIC && ADV_H + 2 <= ADV_PAD;
    const long long last = (long long)(l0 + ADV_R - 1) * nx + x0 + ADV_W + ADV_COLS;
    const bool inside = last < (long long)nbuf * nx + ADV_PAD_AFTER;
    return (ADV_COLS % 2 == 1 || (nx & 1) == 0) &&
           ((padded && inside) || (x0 >= 0 && x0 + ADV_W <= nx)) && l0 >= 0 &&
           l0 + ADV_R <= nbuf;
}

// Field buffers of a pass in shared memory: one at 2 steps, two (ping-pong) from 3.
#define ADV_NBUF (ADV_STEPS > 2 ? 2 : 1)
#ifndef ADV_PASS_MINB
#define ADV_PASS_MINB 1
#endif

// Several steps per pass (temporal blocking), the general form: step s updates the tile
// grown by 2·(ADV_STEPS − s) cells, so each step's stencil reads only what the step
// before wrote; DRAM moves f in and out once per pass, du and dv come through L1/L2 each
// step (the same lines every step). Each cell's arithmetic is adv_step's (coef, eval,
// offset: the same fma), so a pass equals single steps bit for bit. Threads own ADV_COLS
// adjacent columns of the grown tile and walk down them, reusing each row's coefficients
// for five outputs. Steady velocities only (arrays, uniform, rotation).
template <class Load, class Store>
__device__ __forceinline__ void general_step(int h, const Velocity& vel, int x0, int y0, int nx,
                                             int ny, int base, int nbuf, Load load, Store store) {
    constexpr int C = ADV_COLS;
    const int c0 = ADV_H - h, c1 = ADV_H + ADV_TX + h, r0 = ADV_H - h, r1 = ADV_H + ADV_TY + h;
    const int c = c0 + C * threadIdx.x;
    if (c >= c1) return;
    auto row_coef = [&](int r) { return row_coefs(load(c, r)); };
    RowCoef k0 = row_coef(r0 - 2), k1 = row_coef(r0 - 1), k2 = row_coef(r0), k3 = row_coef(r0 + 1);
#pragma unroll 5
    for (int r = r0; r < r1; ++r) {
        const RowCoef k4 = row_coef(r + 2);
        const int y = y0 + r;
        const bool row = ADV_PERIODIC || (y >= 2 && y < ny - 2);
        real out[C];
        for (int m = 0; m < C; ++m) {
            const int x = x0 + c + m;
            out[m] = k2.c[m].c0;
            if (row && (ADV_PERIODIC || (x >= 2 && x < nx - 2))) {
                const int i = grid_index(x, nx), j = grid_index(y, ny);
                real a, b;
                displacement(vel, i, j, nx, ny, (size_t)buffer_row(y, base, nbuf, ny) * nx + i, a, b);
                out[m] = general_cell(k0, k1, k2, k3, k4, m, a, b);
            }
        }
        store(c, r, out);
        k0 = k1; k1 = k2; k2 = k3; k3 = k4;
    }
}

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_pass)
extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_PASS_MINB)
adv_pass(ADV_PARAMS) {
    // rows: the tile's, ADV_TY (adv_step's argument list, so one launch serves both).
    extern __shared__ __align__(16) unsigned char adv_smem[];
    real* buf0 = (real*)adv_smem;
    real* buf1 = buf0 + (ADV_NBUF - 1) * ADV_W * ADV_R;
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    // Grid position of buffer cell (0, 0).
    const int x0 = blockIdx.x * ADV_TX - ADV_H, y0 = jw0 + blockIdx.y * ADV_TY - ADV_H;
    auto step = [&](int h, auto load, auto store) {
        general_step(h, vel, x0, y0, nx, ny, base, nbuf, load, store);
    };
    if (tile_direct(x0, y0, nx, base, nbuf))
        tile_pass<true>(buf0, buf1, f, g, x0, y0, nx, ny, base, nbuf, jw1, step);
    else
        tile_pass<false>(buf0, buf1, f, g, x0, y0, nx, ny, base, nbuf, jw1, step);
}
#endif

// adv_pass for the separable presets: the tile's x weights in shared memory after the
// field buffers (one set per tile row, the same every step: the velocity is steady), y
// weights once per column and step, raw values in the five-row window. The steps are
// unrolled and the rows by 5 (compile-time bounds), so the window moves by register
// renaming, not copies (rows fully unrolled instead: 0.825 against 0.699 s on contest 5).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_pass_sep)
extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_PASS_MINB)
adv_pass_sep(ADV_PARAMS) {
    extern __shared__ __align__(16) unsigned char adv_smem[];
    real* buf0 = (real*)adv_smem;
    real* buf1 = buf0 + (ADV_NBUF - 1) * ADV_W * ADV_R;
    Lagrange* wxs = (Lagrange*)(buf0 + ADV_NBUF * ADV_W * ADV_R);
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    const int x0 = blockIdx.x * ADV_TX - ADV_H, y0 = jw0 + blockIdx.y * ADV_TY - ADV_H;
    // The x weights of the tile's rows, and whether the rows' stencils all start alike and
    // the columns' too (all but the tiles that hold the rotation's centre row or column, or
    // a periodic wrap): then x and y need no branch or select, and x takes 4 rows, not 5.
    const bool up = du_of_row(vel, grid_index(y0, ny)) > (real)0;
    const bool right = dv_of_col(vel, grid_index(x0, nx)) > (real)0;
    bool alike = true;
    for (int r = threadIdx.x; r < ADV_R; r += ADV_BX) {
        const Lagrange l = lagrange(du_of_row(vel, grid_index(y0 + r, ny)));
        wxs[r] = l;
        alike = alike && (l.s != (real)0) == up;
    }
    for (int c = threadIdx.x; c < ADV_W; c += ADV_BX)
        alike = alike && (dv_of_col(vel, grid_index(x0 + c, nx)) > (real)0) == right;
    alike = __syncthreads_and(alike);
    const bool direct = tile_direct(x0, y0, nx, base, nbuf);
    // Every cell a step computes lies 2 or more cells inside the grid.
    const bool clear = ADV_PERIODIC || (x0 >= 0 && x0 + ADV_W <= nx && y0 >= 0 && y0 + ADV_R <= ny);
#define ADV_SEP_PASS(CHECK, XS, YS, DIRECT)                                                 \
    tile_pass<DIRECT>(buf0, buf1, f, g, x0, y0, nx, ny, base, nbuf, jw1,                     \
                      [&](int h, auto load, auto store) {                                    \
                          separable_step<CHECK, XS, YS>(h, wxs, vel, x0, y0, nx, ny, right,  \
                                                        load, store);                        \
                      })
    if (!direct) ADV_SEP_PASS(!ADV_PERIODIC, 2, 2, false);
    else if (!clear) ADV_SEP_PASS(true, 2, 2, true);
    else if (!alike) ADV_SEP_PASS(false, 2, 2, true);
    else if (!up) ADV_SEP_PASS(false, 0, 0, true);
    else ADV_SEP_PASS(false, 1, 0, true);
#undef ADV_SEP_PASS
}
#endif

// adv_step with the rows brought by the copy engine (sm_90 bulk copies, no registers held
// by loads in flight): a block's tile is ADV_COLS·ADV_BX columns wide; each f row it needs
// (with the two halo columns on each side) and, in the arrays mode, the du and dv rows of
// the output row it completes land in a ring of ADV_RING shared-memory slots, each slot's
// arrival signalled by an mbarrier. Thread 0 refills a slot once the block is past it, so
// ADV_RING − 1 rows are in flight while the walk computes. The single-step kernel is bound
// by the latency of its loads, not by bytes or instructions (75.8 % of the copy bandwidth
// with loads through L1, 80 % with an L2 prefetch); this keeps the copies ahead without
// registers. Each cell's arithmetic is adv_step's. Needs every row to start on 16 bytes
// (cuda.rs: bulk_rows) and a dynamic shared block of adv_bulk_bytes().
#ifndef ADV_RING
#define ADV_RING 8
#endif
#define ADV_SW (ADV_COLS * ADV_BX)
// Reals per slot: f at columns x0 − 2 .. x0 + ADV_SW + 1, then du and dv of one row.
#define ADV_SLOT_F (ADV_SW + 4)
#define ADV_SLOT (ADV_SLOT_F + (ADV_MODE == 0 ? 2 * ADV_SW : 0))

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_step_bulk)
extern "C" __global__ void __launch_bounds__(ADV_BX, ADV_MINB)
adv_step_bulk(ADV_PARAMS) {
    constexpr int C = ADV_COLS;
    extern __shared__ __align__(16) unsigned char adv_smem[];
    real* ring = (real*)adv_smem;
    unsigned long long* full = (unsigned long long*)(ring + ADV_RING * ADV_SLOT);
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const int x0 = blockIdx.x * ADV_SW, t = C * threadIdx.x, i0 = x0 + t;
    const int j0 = jw0 + blockIdx.y * rows, j1 = min(j0 + rows, jw1);
    // f rows j0 − 2 .. j1 + 1: row q of the walk is grid row j0 − 2 + q.
    const int nq = j1 - j0 + 4;
    const int width = min(ADV_SW, nx - x0);
    const unsigned fbytes = (unsigned)((width + 4) * sizeof(real) + 15) & ~15u;
    const unsigned vbytes = (unsigned)(width * sizeof(real));
    if (threadIdx.x == 0) mbar_init_ring(full, ADV_RING);
    __syncthreads();
    auto issue = [&](int q) {
        const int s = q % ADV_RING;
        real* slot = ring + s * ADV_SLOT;
        const int r = j0 - 2 + q;
        const bool vel = ADV_MODE == 0 && q >= 4;
        mbar_expect(&full[s], fbytes + (vel ? 2 * vbytes : 0));
        bulk_copy(slot, f + (size_t)buffer_row(r, base, nbuf, ny) * nx + x0 - 2, fbytes, &full[s]);
        if (vel) {
            // du, dv of the output row this f row completes (r − 2), inside the owned rows.
            const size_t n = (size_t)(r - 2 - base) * nx + x0;
            bulk_copy(slot + ADV_SLOT_F, du + n, vbytes, &full[s]);
            bulk_copy(slot + ADV_SLOT_F + ADV_SW, dv + n, vbytes, &full[s]);
        }
    };
    if (threadIdx.x == 0)
        for (int q = 0; q < min(ADV_RING, nq); ++q) issue(q);
    // Periodic tiles at the grid's sides find their wrapped halo columns in global memory.
    const bool wrap = ADV_PERIODIC && (i0 < 2 || i0 + C + 2 > nx);
    // Row q's coefficients from its slot (the slot stays until release(q)).
    auto take = [&](int q, const real*& slot) {
        const int s = q % ADV_RING;
        mbar_wait(&full[s], (unsigned)(q / ADV_RING) & 1u);
        slot = ring + s * ADV_SLOT;
        RowVals v = row_pairs(slot + t);
        if (wrap) {
            const real* fr = f + (size_t)buffer_row(j0 - 2 + q, base, nbuf, ny) * nx;
            for (int o = 0; o < C + 4; ++o) {
                const int x = i0 - 2 + o;
                if (x < 0 || x >= nx) v.v[o] = fr[grid_index(x, nx)];
            }
        }
        return row_coefs(v);
    };
    auto release = [&](int q) {
        __syncthreads();
        if (threadIdx.x == 0 && q + ADV_RING < nq) issue(q + ADV_RING);
    };
    const Velocity vel = {du, dv, a0, a1, a2, a3};
    const real* slot;
    RowCoef k0 = take(0, slot);
    release(0);
    RowCoef k1 = take(1, slot);
    release(1);
    RowCoef k2 = take(2, slot);
    release(2);
    RowCoef k3 = take(3, slot);
    release(3);
#pragma unroll 5
    for (int q = 4; q < nq; ++q) {
        const RowCoef k4 = take(q, slot);
        const int j = j0 + q - 4;
        const bool row = ADV_PERIODIC || (j >= 2 && j < ny - 2);
        real out[C];
        for (int c = 0; c < C; ++c) {
            const int i = i0 + c;
            out[c] = k2.c[c].c0;
            if (row && (ADV_PERIODIC || (i >= 2 && i < nx - 2))) {
                real a, b;
                if (ADV_MODE == 0) {
                    a = slot[ADV_SLOT_F + t + c];
                    b = slot[ADV_SLOT_F + ADV_SW + t + c];
                } else {
                    displacement(vel, i, j, nx, ny, 0, a, b);
                }
                out[c] = general_cell(k0, k1, k2, k3, k4, c, a, b);
            }
        }
        real* q_g = g + (size_t)(j - base) * nx + i0;
        if (C % 2 == 0) {
            if (t < width) store_pairs(q_g, out);
        } else {
            for (int c = 0; c < C; ++c)
                if (t + c < width) q_g[c] = out[c];
        }
        release(q);
        k0 = k1; k1 = k2; k2 = k3; k3 = k4;
    }
}
#endif

// Several steps per pass for velocity arrays with each cell's weights in registers
// (adv_pass_w). The velocity is steady, so a cell's Lagrange weights (the separable
// form's, lagrange()) are the same at every step: a thread owns ADV_WQ adjacent cells on
// each of ADV_WRQ rows of the pass's grown tile for all of its steps, computes their x and
// y weights once from du, dv, and each step costs 4 × 4 + 4 multiply-adds a cell on raw
// values from shared memory (R rows of cells read R + 3 rows), against the general
// form's ≈ 64 operations (a row's coefficients, six Horner evaluations, the y
// coefficients). Warps whose cells' stencils all start alike in x and in y (one sign of
// du and one of dv: all but those at the rotation's centre row and column) take four
// rows of four values; the others the five-term sums, which round the same (their extra
// term is an exact zero), so the result does not depend on the warp.
// The tile: ADV_WTX × ADV_TY cells out, the threads' cells cover it grown by ADV_WE
// columns (2·(ADV_STEPS − 1) rounded up to whole threads' cells) and 2·(ADV_STEPS − 1)
// rows each side; a field buffer in shared memory holds the first step's input (grown by
// two more), a second one takes the steps' results in turn; step s computes the tile
// grown by 2·(ADV_STEPS − s), the last writes g. Per cell and pass DRAM moves f in and
// out, du and dv: 16 B / ADV_STEPS per cell and step in f32 (neighbouring tiles' halos
// come from L2). Where the time goes (ncu, 3 steps over 56 × 64 tiles, three rows a
// thread, before the sign-bit votes; contest 5, H100): multiply-adds and multiplies 72 %
// of the instructions (the weights about a fifth of them), the per-tile code 11 % of the
// instructions and 21 % of the stall samples; 0.61 instructions issued a cycle per
// scheduler with 3 warps each; the stalls led by shared-memory results (13 %) and the
// barriers (10 %) (docs/PERFORMANCE.md).
#ifndef ADV_WQ
#define ADV_WQ (16 / (int)sizeof(real))
#endif
#ifndef ADV_WTX
#define ADV_WTX 48
#endif
#define ADV_WE (ADV_WQ * ((2 * (ADV_STEPS - 1) + ADV_WQ - 1) / ADV_WQ))
#define ADV_WQX ((ADV_WTX + 2 * ADV_WE) / ADV_WQ)
#define ADV_WRY (ADV_TY + 4 * (ADV_STEPS - 1))
#define ADV_WW (ADV_WTX + 2 * ADV_WE + 4)
#define ADV_WR (ADV_TY + 4 * ADV_STEPS)
// Rows of cells a thread owns (1 to 4: R rows read R + 3 rows of the buffer, not 4R; f32
// takes 3 at 168 registers, f64 2 at 128). The first step's rows are whole threads' rows;
// at R > 2 a thread's rows may straddle a later step's edge, and its rows outside that
// step's tile compute values no written cell reads.
#ifndef ADV_WRQ
#define ADV_WRQ 1
#endif
#define ADV_WT (ADV_WQX * ADV_WRY / ADV_WRQ)
#ifndef ADV_WMINB
#define ADV_WMINB 1
#endif
// Shared memory: three field buffers and the cells' du and dv, each on 128 bytes (where
// the tensor copies land).
#define ADV_WALIGN (128 / (int)sizeof(real))
#define ADV_WBUF ((ADV_WW * ADV_WR + ADV_WALIGN - 1) / ADV_WALIGN * ADV_WALIGN)
#define ADV_WVEL ((ADV_WQX * ADV_WQ * ADV_WRY + ADV_WALIGN - 1) / ADV_WALIGN * ADV_WALIGN)
static_assert(ADV_WRY % ADV_WRQ == 0, "adv_pass_w: the first step's rows in whole threads' rows");

// N values from 16-byte aligned p (N·sizeof(real) a multiple of 16), as 16-byte loads.
template <int N>
__device__ __forceinline__ void load16(const real* p, real* out) {
    constexpr int per = 16 / (int)sizeof(real);
#pragma unroll
    for (int k = 0; k < N / per; ++k) {
        const float4 u = ((const float4*)p)[k];
        memcpy(out + k * per, &u, 16);
    }
}

// The word holding x's sign bit (bit 31).
__device__ __forceinline__ unsigned sign_word(float x) { return __float_as_uint(x); }
__device__ __forceinline__ unsigned sign_word(double x) { return (unsigned)__double2hiint(x); }

// A cell's four weights for a stencil starting at i-2 (M = 0) or i-1 (M = 1), straight
// from d (no d - 1 shift), scaled: x's by 6 and y's by 1/6, so that their constants
// (multiples of 1/6 and 1/2) leave the weights' formulas: 9 operations for x's, 10 for
// y's (against lagrange4's 11 or 12 each). With t = d - M, p = t(t - 1) and q = (t + 1)(t +
// 2) the weights are -p(t+1)/6, p(t+2)/2, -q(t-1)/2, qt/6; here p and q carry the scale
// (1 for x, 1/36 for y, through s·d) and the rest is each weight's 6-fold.
template <int M, bool X>
__device__ __forceinline__ void scaled4(real d, real* w) {
    const real s = (real)(1.0 / 36.0);
    const real sd = X ? d : d * s;
    const real p = M ? fma(sd, d - (real)3, X ? (real)2 : 2 * s) : fma(sd, d, -sd);
    const real q = M ? fma(sd, d, sd) : fma(sd, d + (real)3, X ? (real)2 : 2 * s);
    w[0] = M ? -p * d : fma(-p, d, -p);
    w[1] = p * fma(d, (real)3, M ? (real)3 : (real)6);
    w[2] = q * fma(d, (real)-3, M ? (real)6 : (real)3);
    w[3] = M ? fma(q, d, -q) : q * d;
}

// A cell's N weights on an axis (X: x's, else y's; scaled as scaled4's) whose stencils all
// start at S (0: i-2, 1: i-1; N = 4), or each at its own (S = 2, N = 5: d's sign bit
// picks the start, and the fifth weight is an exact zero, so the sums round as N = 4's).
template <int S, int N, bool X>
__device__ __forceinline__ void weights(real d, real* w) {
    if (S == 2) {
        real w0[4], w1[4];
        scaled4<0, X>(d, w0);
        scaled4<1, X>(d, w1);
        const bool m = !(sign_word(d) >> 31);
        w[0] = m ? (real)0 : w0[0];
#pragma unroll
        for (int k = 1; k < 4; ++k) w[k] = m ? w1[k - 1] : w0[k];
        w[4] = m ? w1[3] : (real)0;
    } else {
        scaled4<S, X>(d, w);
    }
}

// XS, YS: the stencils' start in x and y shared by every computed cell of the tile (0:
// i-2, 1: i-1), or 2: each cell's own (five-term sums).
template <int XS, int YS>
__device__ __forceinline__ void weighted_steps(real* buf0, real* buf1, real* g, const real* a,
                                               const real* b, unsigned held, int qx, int ry,
                                               int x0, int y0, int nx, int base, int jw1) {
    constexpr int Q = ADV_WQ, R = ADV_WRQ;
    constexpr int NX = XS == 2 ? 5 : 4, NY = YS == 2 ? 5 : 4;
    constexpr int OX = XS == 2 ? 0 : XS, OY = YS == 2 ? 0 : YS;
    real wx[R * Q][NX], wy[R * Q][NY];
#pragma unroll
    for (int c = 0; c < R * Q; ++c) {
        weights<XS, NX, true>(a[c], wx[c]);
        weights<YS, NY, false>(b[c], wy[c]);
    }
    // The cells' position relative to the tile's first output cell (of their first row).
    const int qc = Q * qx - ADV_WE, ly = ry - 2 * (ADV_STEPS - 1);
    const real* src = buf0;
    real* dst = buf1;
#pragma unroll
    for (int s = 1; s <= ADV_STEPS; ++s) {
        const int h = 2 * (ADV_STEPS - s);
        const bool active = qc + Q > -h && qc < ADV_WTX + h && ly + R > -h && ly < ADV_TY + h;
        if (active) {
            real out[R][Q];
            // Row ry + k of the buffer: the first row's cells' rows − 2 + k; columns Q·qx ..:
            // their − 2. Cell row r takes rows k = r .. r + NY − 1.
            const real* p = src + ry * ADV_WW + Q * qx;
#pragma unroll
            for (int k = 0; k < NY + R - 1; ++k) {
                real v[Q + 4];
                load16<Q + 4>(p + (OY + k) * ADV_WW, v);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const int l = k - r;
                    if (l < 0 || l >= NY) continue;
#pragma unroll
                    for (int m = 0; m < Q; ++m) {
                        const real* w = wx[r * Q + m];
                        real x;
                        if (NX == 4)
                            x = fma(w[3], v[m + OX + 3], fma(w[2], v[m + OX + 2], fma(w[1], v[m + OX + 1], w[0] * v[m + OX])));
                        else
                            x = fma(w[4], v[m + 4], fma(w[3], v[m + 3], fma(w[2], v[m + 2], fma(w[1], v[m + 1], w[0] * v[m]))));
                        out[r][m] = l == 0 ? wy[r * Q + m][0] * x : fma(wy[r * Q + m][l], x, out[r][m]);
                    }
                }
            }
            if (held) {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const real* c = src + (ry + r + 2) * ADV_WW + Q * qx + 2;
#pragma unroll
                    for (int m = 0; m < Q; ++m)
                        if (held & (1u << (r * Q + m))) out[r][m] = c[m];
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (s < ADV_STEPS) {
                    store_in_pairs_spread<Q>(dst + (ry + r + 2) * ADV_WW + Q * qx + 2, out[r], qx & 8);
                } else {
                    const int x = x0 + qc, y = y0 + ly + r;
                    // Threads of more than two rows straddle the tile's edge rows; their
                    // rows outside it are not the tile's (and read rows no step wrote).
                    const bool mine = ADV_WRQ <= 2 || (ly + r >= 0 && ly + r < ADV_TY);
                    if (mine && y < jw1 && x < nx) {
                        real* q = g + (size_t)(y - base) * nx + x;
                        if (x + Q <= nx && (nx & 1) == 0) {
                            store_in_pairs<Q>(q, out[r]);
                        } else {
                            for (int m = 0; m < Q; ++m)
                                if (x + m < nx) q[m] = out[r][m];
                        }
                    }
                }
            }
        }
        if (s < ADV_STEPS) __syncthreads();
        const real* t = dst;
        dst = (real*)src;
        src = t;
    }
}

// Whether tile (x0, y0)'s field and its cells' du and dv come by tensor copies: on a
// non-periodic grid always (the host runs adv_pass_w on rows of 16 bytes only, which its
// tensor maps need, so this is known when it compiles and the value-by-value path is
// compiled out), on a periodic one where its first-step input lies inside the buffer's
// rows and the grid's columns. Elsewhere the copies fill what lies outside the grid (or
// past a slab's buffer) with zeros: only held cells, and cells no written cell depends on,
// read those.
__device__ __forceinline__ bool weighted_direct(int x0, int y0, int nx, int base, int nbuf) {
    const int bx = x0 - ADV_WE - 2, l0 = y0 - 2 * ADV_STEPS - base;
    return !ADV_PERIODIC || (bx >= 0 && bx + ADV_WW <= nx && l0 >= 0 && l0 + ADV_WR <= nbuf);
}

// A persistent block takes tile after tile (tile k: column k mod ntx, row k / ntx), and
// while it computes one, the copy engine brings the next one's field and its cells' du
// and dv into shared memory (a third field buffer and a second velocity set, an
// mbarrier each of the two sets):
// the tile's loads, about as long as its arithmetic, are off the critical path. Three
// tensor copies (boxes of fmap: the buffer's rows from column -2, of umap and vmap: du
// and dv) that one thread issues; row by row bulk copies took a fifth of the time
// (issued lane by lane; docs/PERFORMANCE.md). Periodic wraps load value by value when
// their turn comes (the grid's sides did too, and cost 8 %: a block waits on its own
// loads there).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_pass_w)
extern "C" __global__ void __launch_bounds__(ADV_WT > 1024 ? 1024 : ADV_WT, ADV_WMINB)
adv_pass_w(ADV_PARAMS, const __grid_constant__ tensor_map fmap,
           const __grid_constant__ tensor_map umap, const __grid_constant__ tensor_map vmap) {
    constexpr int Q = ADV_WQ;
    extern __shared__ __align__(16) unsigned char adv_smem[];
    // On 128 bytes, by an offset from adv_smem (so the compiler still knows it is shared).
    real* const bufs = (real*)(adv_smem + (-smem_addr(adv_smem) & 127u));
    real* const vel = bufs + 3 * ADV_WBUF;  // two sets: du, dv of tile it (set it & 1)
    unsigned long long* const full = (unsigned long long*)(vel + 4 * ADV_WVEL);
    const real* f = f_pad + ADV_PAD;
    real* g = g_pad + ADV_PAD;
    const int ntx = (nx + ADV_WTX - 1) / ADV_WTX, ntiles = ntx * ((jw1 - jw0 + ADV_TY - 1) / ADV_TY);
    int k = blockIdx.x;
    if (k >= ntiles) return;
    if (threadIdx.x == 0) mbar_init_ring(full, 2);
    __syncthreads();
    const unsigned bytes = (unsigned)(sizeof(real) * (ADV_WR * ADV_WW + 2 * ADV_WQX * Q * ADV_WRY));
    // Tile k's first output cell; k advances by gridDim.x, so its column and row advance
    // by fixed steps (no division per tile).
    const int gq = gridDim.x / ntx, gr = gridDim.x % ntx;
    auto advance = [&](int& kx, int& ky) {
        kx += gr;
        ky += gq;
        if (kx >= ntx) {
            kx -= ntx;
            ++ky;
        }
    };
    // Tile (x0, y0)'s field rows (from column -2) into field buffer b, its cells' du and dv.
    auto issue = [&](int x0, int y0, int b, int v) {
        const int x = x0 - ADV_WE, l0 = y0 - 2 * ADV_STEPS - base;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_expect(full + v, bytes);
        tma_load_2d(bufs + b * ADV_WBUF, &fmap, x, l0, full + v);
        tma_load_2d(vel + 2 * v * ADV_WVEL, &umap, x, l0 + 2, full + v);
        tma_load_2d(vel + (2 * v + 1) * ADV_WVEL, &vmap, x, l0 + 2, full + v);
    };
    int in = 0;
    unsigned parity = 0;  // bit v: the phase of full[v] to wait for
    int kx = k % ntx, ky = k / ntx;
    bool pre = weighted_direct(kx * ADV_WTX, jw0 + ky * ADV_TY, nx, base, nbuf);
    if (pre && threadIdx.x == 0) issue(kx * ADV_WTX, jw0 + ky * ADV_TY, in, 0);
    const int qx = threadIdx.x % ADV_WQX, ry = threadIdx.x / ADV_WQX * ADV_WRQ;
    for (int it = 0; k < ntiles; k += gridDim.x, ++it) {
        const int x0 = kx * ADV_WTX, y0 = jw0 + ky * ADV_TY;
        real* const buf = bufs + in * ADV_WBUF;
        const int next = (in + 2) % 3;
        // The tile's barrier, before anything of it: every warp is done with the tile
        // before, so the next tile's copies may take that tile's scratch buffer and the
        // velocity set of the tile before it (read at its start), and step 1 may write the
        // buffer the tile before read last. The copies thus start before this tile's
        // wait, votes and weights (contest 5, H100, 2026-11-27: 512 steps 147.4 ms against
        // 148.1 with the barrier after the votes and one velocity set; 2048 steps 596 ms).
        __syncthreads();
        const bool now = pre;
        advance(kx, ky);  // the next tile's (x0, y0 are this one's)
        if (k + gridDim.x < ntiles) {
            const int nx0 = kx * ADV_WTX, ny0 = jw0 + ky * ADV_TY;
            pre = weighted_direct(nx0, ny0, nx, base, nbuf);
            if (pre && threadIdx.x == 0) issue(nx0, ny0, next, (it + 1) & 1);
        }
        // The thread's cells: columns x0 − ADV_WE + Q·qx + m, rows y0 − 2(ADV_STEPS − 1) + ry
        // + r (cell r·Q + m).
        constexpr int R = ADV_WRQ;
        const int xc = x0 - ADV_WE + Q * qx, yc = y0 - 2 * (ADV_STEPS - 1) + ry;
        real a[R * Q], b[R * Q];
        if (now) {
            mbar_wait(full + (it & 1), (parity >> (it & 1)) & 1u);
            parity ^= 1u << (it & 1);
            const real* const dus = vel + 2 * (it & 1) * ADV_WVEL;
            const real* const dvs = dus + ADV_WVEL;
#pragma unroll
            for (int r = 0; r < R; ++r) {
                load16<Q>(dus + (ry + r) * ADV_WQX * Q + Q * qx, a + r * Q);
                load16<Q>(dvs + (ry + r) * ADV_WQX * Q + Q * qx, b + r * Q);
            }
        } else {
            const int bx = x0 - ADV_WE - 2, by = y0 - 2 * ADV_STEPS;
            for (int e = threadIdx.x; e < ADV_WR * ADV_WW; e += ADV_WT) {
                const int t = e / ADV_WW, c = e % ADV_WW;
                buf[t * ADV_WW + c] =
                    f[(size_t)buffer_row(by + t, base, nbuf, ny) * nx + grid_index(bx + c, nx)];
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const size_t n = (size_t)buffer_row(yc + r, base, nbuf, ny) * nx;
#pragma unroll
                for (int m = 0; m < Q; ++m) {
                    const size_t i = n + grid_index(xc + m, nx);
                    a[r * Q + m] = du[i];
                    b[r * Q + m] = dv[i];
                }
            }
        }
        // Held cells (the contest's outer two rings, columns past the grid) keep their
        // value and take no part in the votes; tiles clear of them skip the tests.
        unsigned held = 0;
        // The votes go by sign bits (ORed and ANDed, a few logic operations for all the
        // cells, against a compare and a select each): a cell's side is its sign bit, so
        // d = +0 counts as positive, and the five-term form picks its stencil the same way
        // (at d = ±0 either stencil gives the cell's own value exactly).
        unsigned xor_ = 0, xand = ~0u, yor = 0, yand = ~0u;
        const bool clear = ADV_PERIODIC || (x0 - ADV_WE >= 2 && x0 + ADV_WTX + ADV_WE <= nx - 2 &&
                                            y0 - 2 * ADV_STEPS >= 2 && y0 + ADV_TY + 2 * ADV_STEPS <= ny - 2);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const bool row = ADV_PERIODIC || (yc + r >= 2 && yc + r < ny - 2);
#pragma unroll
            for (int m = 0; m < Q; ++m) {
                const int x = xc + m, c = r * Q + m;
                if (clear || (row && x >= 2 && x < nx - 2)) {
                    xor_ |= sign_word(a[c]);
                    xand &= sign_word(a[c]);
                    yor |= sign_word(b[c]);
                    yand &= sign_word(b[c]);
                } else {
                    held |= 1u << c;
                    a[c] = (real)0;
                    b[c] = (real)0;
                }
            }
        }
        // Bits: some computed cell has a negative du (sign bit set), a positive one, a
        // negative dv, a positive one.
        unsigned vote = xor_ >> 31 | (~xand >> 31) << 1 | (yor >> 31) << 2 | (~yand >> 31) << 3;
        // The warp's cells all vote alike on an axis when only one of its two bits is set;
        // each warp takes its own form (the five-term sums round as the four-term ones).
        // Every form passes the same ADV_STEPS − 1 barriers, each warp whole (its vote is
        // the warp's), which is what bar.sync asks of warps in different branches.
        vote = __reduce_or_sync(~0u, vote);
        if (!now) __syncthreads();  // the values loaded one by one, before step 1 reads them
        const bool xm = !(vote & 2u), xp = !(vote & 1u), ym = !(vote & 8u), yp = !(vote & 4u);
        real* const other = bufs + ((in + 1) % 3) * ADV_WBUF;
        if (xm && ym) weighted_steps<0, 0>(buf, other, g, a, b, held, qx, ry, x0, y0, nx, base, jw1);
        else if (xm && yp) weighted_steps<0, 1>(buf, other, g, a, b, held, qx, ry, x0, y0, nx, base, jw1);
        else if (xp && ym) weighted_steps<1, 0>(buf, other, g, a, b, held, qx, ry, x0, y0, nx, base, jw1);
        else if (xp && yp) weighted_steps<1, 1>(buf, other, g, a, b, held, qx, ry, x0, y0, nx, base, jw1);
        else weighted_steps<2, 2>(buf, other, g, a, b, held, qx, ry, x0, y0, nx, base, jw1);
        in = next;
    }
}
#endif

// Whether any of the n values at f is NaN or infinite: sets *bad to 1 (never clears it).
// The engine runs it once between chunks of steps, so a run never ends "completed" on a
// field that went non-finite.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_adv_nonfinite)
extern "C" __global__ void adv_nonfinite(const real* __restrict__ f, u64 n,
                                         unsigned int* bad) {
    const u64 stride = (u64)gridDim.x * blockDim.x;
    bool any = false;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += stride)
        any |= !isfinite(f[i]);
    if (__syncthreads_or(any) && threadIdx.x == 0) atomicOr(bad, 1u);
}
#endif
