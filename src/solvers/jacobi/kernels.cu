// Jacobi iteration for u_xx + u_yy - alpha*u = f on [-1,1]^2, row-major u[j*n + i]
// (x fastest). Compiled with -Dreal=float|double, -DJ_BX (threads per block in x) and
// -DJ_RY (rows each block walks down).

#ifndef J_BX
#define J_BX 128
#endif
#ifndef J_RY
#define J_RY 32
#endif
// The slab row kernel's loop unroll (see jacobi_rows; a diagnosis knob).
#ifndef J_ROWS_UNROLL
#define J_ROWS_UNROLL 1
#endif
#define J_PRAGMA_(x) _Pragma(#x)
#define J_PRAGMA(x) J_PRAGMA_(x)

// Manufactured solutions; keep in step with solvers/jacobi/manufactured.rs.
__device__ __forceinline__ double exact_u(int kind, double x, double y) {
    if (kind == 0) return (1.0 - x * x) * (1.0 - y * y);
    const double k = 1.5707963267948966; // pi/2: sin(k(x+1)) vanishes at x = -1 and x = 1
    return sin(k * (x + 1.0)) * sin(k * (y + 1.0));
}

__device__ __forceinline__ double forcing(int kind, double alpha, double x, double y) {
    if (kind == 0)
        return -alpha * (1.0 - x * x) * (1.0 - y * y) - 2.0 * (1.0 - x * x) - 2.0 * (1.0 - y * y);
    const double k = 1.5707963267948966;
    return -(2.0 * k * k + alpha) * exact_u(kind, x, y);
}

// Fields for the manufactured problem: u = u_new = 0 (the boundary stays 0), f analytic.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_init)
extern "C" __global__ void jacobi_init(real* __restrict__ u, real* __restrict__ unew,
                                       real* __restrict__ f, int n, int m, int kind,
                                       double alpha, double dx, double dy) {
    const size_t total = (size_t)n * m;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % n), j = (int)(idx / n);
        u[idx] = (real)0;
        unew[idx] = (real)0;
        f[idx] = (real)forcing(kind, alpha, -1.0 + i * dx, -1.0 + j * dy);
    }
}
#endif

// The residual at one point; both sweep kernels call it, so their fields agree bit for bit.
__device__ __forceinline__ real point_resid(real l, real r, real up, real dn, real c, real fv,
                                            real ax, real ay, real b, real rb) {
    return (ax * (l + r) + ay * (up + dn) + b * c - fv) * rb;
}

// One point of a column walk down the rows, the one update of the whole-grid and the slab
// kernels (so their fields agree bit for bit): the point at c_idx from its row above
// (`up`) and its own value (`c`), both then moved one row down; returns resid².
__device__ __forceinline__ double walk_point(const real* __restrict__ u, real* __restrict__ unew,
                                             const real* __restrict__ f, size_t c_idx, int n,
                                             real& up, real& c, real ax, real ay, real b, real rb,
                                             real omega) {
    const real dn = u[c_idx + n];
    const real l = u[c_idx - 1];
    const real r = u[c_idx + 1];
    const real resid = point_resid(l, r, up, dn, c, f[c_idx], ax, ay, b, rb);
    unew[c_idx] = c - omega * resid;
    up = c;
    c = dn;
    return (double)resid * (double)resid;
}

// Book-keeping for sweep k with residual sum of squares `sumsq`; returns true if the
// solve stops here (converged or non-finite).
__device__ __forceinline__ bool record_sweep(u64* ctl, double* hist, unsigned hist_len, u64 k,
                                             double sumsq, int n, int m, double tol) {
    const double err = sqrt(sumsq) / ((double)n * (double)m);
    hist[k % hist_len] = err;
    ctl[0] = k + 1;
    if (!(err == err) || err > 1.7976931348623157e308) {
        ctl[1] = 2;
        return true;
    }
    if (err <= tol) {
        ctl[1] = 1;
        return true;
    }
    return false;
}

// One sweep over the interior. ctl[0] = sweeps done, ctl[1] = stop flag (1 converged,
// 2 non-finite residual); once set, later sweeps return at once, so the host can queue
// many sweeps and read ctl only now and then. The residual norm of sweep `k` lands in
// hist[k % hist_len].
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_sweep)
extern "C" __global__ void __launch_bounds__(J_BX)
jacobi_sweep(const real* __restrict__ u, real* __restrict__ unew, const real* __restrict__ f,
             int n, int m, real ax, real ay, real b, real rb, real omega, double tol,
             u64 k, double* __restrict__ partials, unsigned int* __restrict__ ticket,
             u64* __restrict__ ctl, double* __restrict__ hist, unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;

    const int i = blockIdx.x * J_BX + threadIdx.x;
    const int strips = (m - 2 + J_RY - 1) / J_RY;
    double acc = 0.0;
    for (int strip = blockIdx.y; strip < strips; strip += gridDim.y) {
        if (i < 1 || i > n - 2) break;
        const int j0 = 1 + strip * J_RY;
        const int j1 = min(j0 + J_RY, m - 1);
        size_t c_idx = (size_t)j0 * n + i;
        real up = u[c_idx - n];
        real c = u[c_idx];
#pragma unroll 4
        for (int j = j0; j < j1; ++j, c_idx += n) {
            acc += walk_point(u, unew, f, c_idx, n, up, c, ax, ay, b, rb, omega);
        }
    }
    const double block_total = block_sum(acc);
    double total;
    if (grid_sum_last_block(block_total, partials, ticket, &total))
        record_sweep(ctl, hist, hist_len, k, total, n, m, tol);
}
#endif

#ifndef J2_TX
#define J2_TX 64
#endif
#ifndef J2_TY
#define J2_TY 32
#endif

// Two sweeps of a block's J2_TX x J2_TY tile of the grid rows first..last-1 (buffer row 0
// is grid row `base`; the buffer holds rows first-2 .. last+1, those of the grid): the
// tile with a 2-point halo into shared memory, the first sweep on the tile and a 1-point
// ring (rows first-1 and last too, as a neighbour computes them, from the same inputs),
// then the second on the tile, written to unew. Each point is jacobi_sweep's arithmetic,
// so two sweeps here equal two single sweeps bit for bit. acc1, acc2: the block's sums of
// squared residuals of each sweep over its points of rows first..last-1. 256 threads.
__device__ __forceinline__ void two_sweeps(const real* __restrict__ u, real* __restrict__ unew,
                                           const real* __restrict__ f, int n, int m,
                                           int base, int first, int last, real ax, real ay,
                                           real b, real rb, real omega, double& acc1,
                                           double& acc2) {
    constexpr int W0 = J2_TX + 4, H0 = J2_TY + 4, W1 = J2_TX + 2, H1 = J2_TY + 2;
    __shared__ real su[H0][W0];
    __shared__ real s1[H1][W1];
    const int tid = threadIdx.x;
    const int gx0 = blockIdx.x * J2_TX, gy0 = first + blockIdx.y * J2_TY;

    for (int idx = tid; idx < H0 * W0; idx += blockDim.x) {
        const int ly = idx / W0, lx = idx % W0;
        const int gy = gy0 - 2 + ly, gx = gx0 - 2 + lx;
        const bool held = gx >= 0 && gx < n && gy >= 0 && gy < m && gy >= first - 2 &&
                          gy <= last + 1;
        su[ly][lx] = held ? u[(size_t)(gy - base) * n + gx] : (real)0;
    }
    __syncthreads();

    acc1 = 0.0;
    for (int idx = tid; idx < H1 * W1; idx += blockDim.x) {
        const int ly = idx / W1, lx = idx % W1;
        const int gy = gy0 - 1 + ly, gx = gx0 - 1 + lx;
        const real c = su[ly + 1][lx + 1];
        real v = c;
        if (gx >= 1 && gx <= n - 2 && gy >= 1 && gy <= m - 2 && gy >= first - 1 &&
            gy <= last) {
            const real res = point_resid(su[ly + 1][lx], su[ly + 1][lx + 2], su[ly][lx + 1],
                                         su[ly + 2][lx + 1], c,
                                         f[(size_t)(gy - base) * n + gx], ax, ay, b, rb);
            v = c - omega * res;
            if (ly >= 1 && ly <= J2_TY && lx >= 1 && lx <= J2_TX && gy < last)
                acc1 += (double)res * (double)res;
        }
        s1[ly][lx] = v;
    }
    __syncthreads();

    acc2 = 0.0;
    for (int idx = tid; idx < J2_TY * J2_TX; idx += blockDim.x) {
        const int ly = idx / J2_TX, lx = idx % J2_TX;
        const int gy = gy0 + ly, gx = gx0 + lx;
        if (gx >= 1 && gx <= n - 2 && gy >= 1 && gy <= m - 2 && gy < last) {
            const real c = s1[ly + 1][lx + 1];
            const size_t g = (size_t)(gy - base) * n + gx;
            const real res = point_resid(s1[ly + 1][lx], s1[ly + 1][lx + 2], s1[ly][lx + 1],
                                         s1[ly + 2][lx + 1], c, f[g], ax, ay, b, rb);
            unew[g] = c - omega * res;
            acc2 += (double)res * (double)res;
        }
    }
}

// The grid's totals of two per-thread sums (grid_sums_last_block): true in thread 0 of
// the last block, with them in totals.
__device__ __forceinline__ bool two_totals(double acc1, double acc2, double* partials,
                                          unsigned int* ticket, double (&totals)[2]) {
    double sums[2];
    sums[0] = block_sum(acc1);
    __syncthreads();
    sums[1] = block_sum(acc2);
    return grid_sums_last_block<2>(sums, partials, ticket, totals);
}

// Two sweeps per pass through memory (temporal blocking) over the whole grid: two_sweeps
// on every tile (the halo points are computed redundantly by the neighbouring blocks
// too). Residuals of both sweeps are exact: each block sums only the points it owns. If
// sweep k already meets the tolerance, ctl[2] is set and the host redoes sweep k alone,
// so the solve still stops at the study's iteration. Launch with 256 threads.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_sweep2)
extern "C" __global__ void __launch_bounds__(256)
jacobi_sweep2(const real* __restrict__ u, real* __restrict__ unew, const real* __restrict__ f,
              int n, int m, real ax, real ay, real b, real rb, real omega, double tol,
              u64 k, double* __restrict__ partials, unsigned int* __restrict__ ticket,
              u64* __restrict__ ctl, double* __restrict__ hist, unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;
    double acc1, acc2;
    two_sweeps(u, unew, f, n, m, 0, 0, m, ax, ay, b, rb, omega, acc1, acc2);
    double totals[2];
    if (two_totals(acc1, acc2, partials, ticket, totals)) {
        if (record_sweep(ctl, hist, hist_len, k, totals[0], n, m, tol)) ctl[2] = 1;
        else record_sweep(ctl, hist, hist_len, k + 1, totals[1], n, m, tol);
    }
}
#endif

// sum over all points of (u - u_exact)^2, into *out.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_solution_error)
extern "C" __global__ void jacobi_solution_error(const real* __restrict__ u, int n, int m,
                                                 int kind, double dx, double dy,
                                                 double* __restrict__ partials,
                                                 unsigned int* __restrict__ ticket,
                                                 double* __restrict__ out) {
    const size_t total = (size_t)n * m;
    double acc = 0.0;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % n), j = (int)(idx / n);
        const double e = (double)u[idx] - exact_u(kind, -1.0 + i * dx, -1.0 + j * dy);
        acc += e * e;
    }
    const double block_total = block_sum(acc);
    double s;
    if (grid_sum_last_block(block_total, partials, ticket, &s)) *out = s;
}
#endif

// ---- Slabs of rows (a decomposed run) ------------------------------------------------
// A slab's buffers hold grid rows base .. base + rows (its owned rows and one halo row on
// each side); buffer row l is grid row base + l.

// u = u_new = 0 and f analytic on a slab's rows (the same arithmetic as jacobi_init).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_init_rows)
extern "C" __global__ void jacobi_init_rows(real* __restrict__ u, real* __restrict__ unew,
                                            real* __restrict__ f, int n, int base, int rows,
                                            int kind, double alpha, double dx, double dy) {
    const size_t total = (size_t)n * rows;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % n), j = base + (int)(idx / n);
        u[idx] = (real)0;
        unew[idx] = (real)0;
        f[idx] = (real)forcing(kind, alpha, -1.0 + i * dx, -1.0 + j * dy);
    }
}
#endif

// Sweep k over the interior grid rows among first..last of a slab, each point exactly as
// jacobi_sweep computes it; the sum of squared residuals of these rows lands in *slot
// (a block-ordered reduction, so it is the same on every run). Returns at once when the
// solve has stopped (ctl[1] != 0).
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_rows)
extern "C" __global__ void __launch_bounds__(J_BX)
jacobi_rows(const real* __restrict__ u, real* __restrict__ unew, const real* __restrict__ f,
            int n, int m, int base, int first, int last, real ax, real ay, real b, real rb,
            real omega, const u64* __restrict__ ctl, double* __restrict__ partials,
            unsigned int* __restrict__ ticket, double* __restrict__ slot) {
    if (((volatile const u64*)ctl)[1] != 0) return;
    const int lo = max(first, 1), hi = min(last, m - 1);
    const int i = blockIdx.x * J_BX + threadIdx.x;
    const int strips = (hi - lo + J_RY - 1) / J_RY;
    double acc = 0.0;
    for (int strip = blockIdx.y; strip < strips; strip += gridDim.y) {
        if (i < 1 || i > n - 2) break;
        const int s0 = lo + strip * J_RY;
        const int s1 = min(s0 + J_RY, hi);
        size_t c_idx = (size_t)(s0 - base) * n + i;
        real up = u[c_idx - n];
        real c = u[c_idx];
        // Not unrolled: with `#pragma unroll 4` the H100 (driver 580, NVRTC 13.0) wrote
        // rows past s1 — up to the next multiple of J_RY buffer rows — though the PTX's
        // bounds read right; the rolled loop writes exactly its rows
        // (tests/jacobi_slabs.rs, a_slab_sweep_writes_exactly_its_rows).
        J_PRAGMA(unroll J_ROWS_UNROLL)
        for (int j = s0; j < s1; ++j, c_idx += n) {
            acc += walk_point(u, unew, f, c_idx, n, up, c, ax, ay, b, rb, omega);
        }
    }
    const double block_total = block_sum(acc);
    double total;
    if (grid_sum_last_block(block_total, partials, ticket, &total)) *slot = total;
}
#endif

// The book-keeping of sweep k on one slab: the sum of every slab's partial sums, added
// in slab order (so every slab decides alike), each slab's `per_step` values of sweep k
// read from sources[s] + (k mod ring)·per_step.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_record)
extern "C" __global__ void jacobi_record(const u64* __restrict__ sources, int count,
                                         int per_step, unsigned ring, u64 k, int n, int m,
                                         double tol, u64* __restrict__ ctl,
                                         double* __restrict__ hist, unsigned hist_len) {
    // ctl[1] is read by every thread before thread 0 may write it (after the barriers).
    if (blockIdx.x != 0 || ctl[1] != 0) return;
    double sum = 0.0;
    add_slab_sums(sources, count, per_step, ring, k, [&](int, double v) { sum += v; });
    if (threadIdx.x != 0) return;
    record_sweep(ctl, hist, hist_len, k, sum, n, m, tol);
}
#endif

// Two sweeps over the grid rows first..last-1 of a slab's buffer (two_sweeps on every
// tile of the range), from u into unew; each sweep's residual sum of the range into slot0
// and slot1. Launch with 256 threads.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_jacobi_rows2)
extern "C" __global__ void __launch_bounds__(256)
jacobi_rows2(const real* __restrict__ u, real* __restrict__ unew, const real* __restrict__ f,
             int n, int m, int base, int first, int last, real ax, real ay, real b, real rb,
             real omega, const u64* __restrict__ ctl, double* __restrict__ partials,
             unsigned int* __restrict__ ticket, double* __restrict__ slot0,
             double* __restrict__ slot1) {
    if (((volatile const u64*)ctl)[1] != 0) return;
    double acc1, acc2;
    two_sweeps(u, unew, f, n, m, base, first, last, ax, ay, b, rb, omega, acc1, acc2);
    double totals[2];
    if (two_totals(acc1, acc2, partials, ticket, totals)) {
        *slot0 = totals[0];
        *slot1 = totals[1];
    }
}
#endif
