// Jacobi iteration for u_xx + u_yy - alpha*u = f on [-1,1]^2, row-major u[j*n + i]
// (x fastest). Compiled with -Dreal=float|double, -DJ_BX (threads per block in x) and
// -DJ_RY (rows each block walks down).

#ifndef J_BX
#define J_BX 128
#endif
#ifndef J_RY
#define J_RY 32
#endif

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

// One sweep over the interior. ctl[0] = sweeps done, ctl[1] = stop flag (1 converged,
// 2 non-finite residual); once set, later sweeps return at once, so the host can queue
// many sweeps and read ctl only now and then. The residual norm of sweep `k` lands in
// hist[k % hist_len].
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
            const real dn = u[c_idx + n];
            const real l = u[c_idx - 1];
            const real r = u[c_idx + 1];
            const real resid = (ax * (l + r) + ay * (up + dn) + b * c - f[c_idx]) * rb;
            unew[c_idx] = c - omega * resid;
            acc += (double)resid * (double)resid;
            up = c;
            c = dn;
        }
    }
    const double block_total = block_sum(acc);
    double total;
    if (grid_sum_last_block(block_total, partials, ticket, &total)) {
        const double err = sqrt(total) / ((double)n * (double)m);
        hist[k % hist_len] = err;
        ctl[0] = k + 1;
        if (!(err == err) || err > 1.7976931348623157e308) ctl[1] = 2;
        else if (err <= tol) ctl[1] = 1;
    }
}

// sum over all points of (u - u_exact)^2, into *out.
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
