// Red-black SOR for div(eps0 epsr grad V) = -rho (seed 003), nodes stored x fastest:
// V[(k*ny + j)*nx + i]. Compiled with -Dreal=float|double, ES_BX x ES_BY threads per block.
// One launch per colour: thread (tx, j, k) owns node i = 2*tx + ((j + k + oe) & 1), so
// every thread of a launch has a node of the launch's colour. The update is the CPU
// engine's (cpu.rs), operation for operation, so the two agree bit for bit per node.

#ifndef ES_BX
#define ES_BX 32
#endif
#ifndef ES_BY
#define ES_BY 8
#endif

struct EsCoefficients {
    const real* rxp; const real* rxm;
    const real* ryp; const real* rym;
    const real* rzp; const real* rzm;
};

// ctl[0] = iterations done, ctl[1] = stop flag (1 converged, 2 non-finite); acc holds
// colour 0's sums (res^2, V^2) until colour 1 of the same iteration adds its own.
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY)
es_sweep(real* __restrict__ v, const unsigned char* __restrict__ idv,
         const unsigned char* __restrict__ ide, const real* __restrict__ epsr,
         const real* __restrict__ rxp, const real* __restrict__ rxm,
         const real* __restrict__ ryp, const real* __restrict__ rym,
         const real* __restrict__ rzp, const real* __restrict__ rzm,
         int nepsr, int nx, int ny, int nz, int oe, real omega, real q, double tol, u64 iteration,
         double* __restrict__ partials, unsigned int* __restrict__ ticket,
         u64* __restrict__ ctl, double* __restrict__ acc, double* __restrict__ hist,
         unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;
    // The εr table (at most 256 entries) in shared memory: one lookup per face.
    __shared__ real se[256];
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    for (int t = tid; t < nepsr; t += ES_BX * ES_BY) se[t] = epsr[t];
    __syncthreads();
    const int j = blockIdx.y * ES_BY + threadIdx.y;
    double res2 = 0.0, v2 = 0.0;
    // Each block walks z-planes blockIdx.z, + gridDim.z, …: few blocks, so the grid-wide
    // reduction at the end costs little.
    for (int k = blockIdx.z; k < nz; k += gridDim.z) {
    const int i = 2 * (blockIdx.x * ES_BX + threadIdx.x) + ((j + k + oe) & 1);
    if (i < nx && j < ny) {
        const size_t ni = 1, nj = (size_t)nx, nk = (size_t)nx * ny;
        const size_t n = (size_t)k * nk + (size_t)j * nj + i;
        if (idv[n] == 0) {
            if (i == 0) v[n] = v[n + ni];
            else if (i == nx - 1) v[n] = v[n - ni];
            else if (j == 0) v[n] = v[n + nj];
            else if (j == ny - 1) v[n] = v[n - nj];
            else if (k == 0) v[n] = v[n + nk];
            else if (k == nz - 1) v[n] = v[n - nk];
            else {
                const real e = se[ide[n]];
                const real axp = (e + se[ide[n + ni]]) * rxp[i];
                const real axm = (e + se[ide[n - ni]]) * rxm[i];
                const real ayp = (e + se[ide[n + nj]]) * ryp[j];
                const real aym = (e + se[ide[n - nj]]) * rym[j];
                const real azp = (e + se[ide[n + nk]]) * rzp[k];
                const real azm = (e + se[ide[n - nk]]) * rzm[k];
                const real sum = axp * v[n + ni] + axm * v[n - ni] + ayp * v[n + nj] +
                                 aym * v[n - nj] + azp * v[n + nk] + azm * v[n - nk];
                const real den = axp + axm + ayp + aym + azp + azm;
                const real old = v[n];
                const real res = omega * ((sum + q) / den - old);
                const real nv = old + res;
                v[n] = nv;
                res2 += (double)res * (double)res;
                v2 += (double)nv * (double)nv;
            }
        }
    }
    }
    double sums[2] = {res2, v2};
    double block[2];
    for (int s = 0; s < 2; ++s) {
        block[s] = block_sum(sums[s]);
        __syncthreads();
    }
    double total[2];
    if (!grid_sums_last_block<2>(block, partials, ticket, total)) return;
    if (oe == 0) {
        acc[0] = total[0];
        acc[1] = total[1];
        return;
    }
    const double r = sqrt(acc[0] + total[0]), norm = sqrt(acc[1] + total[1]);
    const double rel = norm > 0.0 ? r / norm : r;
    hist[iteration % hist_len] = rel;
    ctl[0] = iteration + 1;
    if (!(rel == rel) || rel > 1.7976931348623157e308) ctl[1] = 2;
    else if (rel <= tol) ctl[1] = 1;
}
