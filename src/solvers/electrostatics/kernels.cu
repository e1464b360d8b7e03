// Red-black SOR for div(eps0 epsr grad V) = -rho (seed 003), compiled with
// -Dreal=float|double, ES_BX x ES_BY threads per block.
//
// Device layout: rows of `pitch` values (a multiple of 32), node i of row (j, k) at
// V[(k*ny + j)*pitch + ES_OFF + i]. ES_OFF = 31 puts the interior pairs (1, 2), (3, 4), …
// at even positions starting on a 128-byte boundary: aligned vector loads, and no lane
// spent on the face nodes 0 and nx-1.
// One byte per node, `code`, indexes a class table: cls_eps[code] is the node's epsr and
// cls_fixed[code] says whether its voltage is held (electrodes, fixed faces). That is the
// study's idVolt/idEpsr in one byte, so an update reads 1 byte of ids per node, not 2.
//
// es_sweep updates the interior nodes of one colour. Thread (tx, j) owns the pair of
// nodes (2p+1, 2p+2) of row j and marches up z through a chunk of planes; in plane k the
// node of the launch's colour is 2p + 1 + ((j + k + oe + 1) & 1). The planes k-1, k, k+1 of the
// pair ride in registers (one vector load per plane), the x-neighbours come from the
// adjacent lanes by shuffle, the y-neighbours by vector loads of rows j-1 and j+1 (L1).
// Every value read is of the other colour except the node's own, so no read races a
// write of the same launch. Faces and fixed nodes need no branch of their own: faces are
// outside the launch (es_faces), and a fixed node computes its update and keeps `old`.
// The update is the CPU engine's, operation for operation (no contraction: --fmad=false),
// so the engines agree bit for bit per node.

#ifndef ES_BX
#define ES_BX 32
#endif
#ifndef ES_BY
#define ES_BY 8
#endif
#ifndef ES_MINB
#define ES_MINB 4
#endif
#define ES_OFF 31

struct __align__(2 * sizeof(real)) real_pair { real x, y; };

__device__ __forceinline__ real pick(real_pair p, int s) { return s ? p.y : p.x; }
__device__ __forceinline__ int pick(uchar2 p, int s) { return s ? p.y : p.x; }

// ctl[0] = iterations done, ctl[1] = stop flag (1 converged, 2 non-finite); acc holds
// colour 0's sums (res^2, V^2) until colour 1 of the same iteration adds its own.
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_sweep(real* __restrict__ v, const unsigned char* __restrict__ code,
         const real* __restrict__ cls_eps, const unsigned char* __restrict__ cls_fixed,
         const real* __restrict__ qnode, int has_qnode, real q,
         const real* __restrict__ rxp, const real* __restrict__ rxm,
         const real* __restrict__ ryp, const real* __restrict__ rym,
         const real* __restrict__ rzp, const real* __restrict__ rzm,
         int nx, int ny, int nz, int pitch, int planes, int oe, real omega, double tol,
         u64 iteration, double* __restrict__ partials, unsigned int* __restrict__ ticket,
         u64* __restrict__ ctl, double* __restrict__ acc, double* __restrict__ hist,
         unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;
    __shared__ real se[256];
    __shared__ unsigned char sf[256];
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    for (int t = tid; t < 256; t += ES_BX * ES_BY) {
        se[t] = cls_eps[t];
        sf[t] = cls_fixed[t];
    }
    __syncthreads();

    const int lane = threadIdx.x & 31;
    const int p = blockIdx.x * ES_BX + threadIdx.x;
    const int i0 = 2 * p + 1;
    const int j = 1 + blockIdx.y * ES_BY + threadIdx.y;
    const int k0 = 1 + blockIdx.z * planes;
    const int k1 = min(k0 + planes, nz - 1);
    // Threads off the mesh still walk the planes: their lanes feed the shuffles.
    const bool row = j < ny - 1 && i0 < nx - 1;
    const int jr = row ? j : 1, pr = row ? p : 0;
    const size_t nj = (size_t)pitch, nk = (size_t)pitch * ny;
    const size_t base = (size_t)jr * nj + ES_OFF + 2 * (size_t)pr + 1;
    const real_pair* vp2 = (const real_pair*)v;
    const uchar2* cp2 = (const uchar2*)code;
    const int ic = min(i0, nx - 2);
    const real xp0 = rxp[ic], xm0 = rxm[ic], xp1 = rxp[ic + 1], xm1 = rxm[ic + 1];
    const real yp = ryp[jr], ym = rym[jr];

    double res2 = 0.0, v2 = 0.0;
    if (k0 < k1) {
        size_t n = (size_t)k0 * nk + base;
        real_pair vm = vp2[(n - nk) >> 1], vc = vp2[n >> 1];
        uchar2 cm = cp2[(n - nk) >> 1], cc = cp2[n >> 1];
        real_pair vn = vp2[(n + nk) >> 1];
        uchar2 cn = cp2[(n + nk) >> 1];
        for (int k = k0; k < k1; ++k, n += nk) {
            // Next plane's pair first, so its latency hides behind this plane's work.
            const int kk = min(k + 2, nz - 1);
            const size_t nn = (size_t)kk * nk + base;
            const real_pair vnn = vp2[nn >> 1];
            const uchar2 cnn = cp2[nn >> 1];

            const int s = (jr + k + oe + 1) & 1;
            const real_pair vs = vp2[(n - nj) >> 1], vN = vp2[(n + nj) >> 1];
            const uchar2 cs = cp2[(n - nj) >> 1], cN = cp2[(n + nj) >> 1];
            // x-neighbours: own pair's other node, and the adjacent pair's near node.
            real left = __shfl_up_sync(0xffffffffu, vc.y, 1);
            int cleft = __shfl_up_sync(0xffffffffu, (int)cc.y, 1);
            real right = __shfl_down_sync(0xffffffffu, vc.x, 1);
            int cright = __shfl_down_sync(0xffffffffu, (int)cc.x, 1);
            const int i = i0 + s;
            if (row && i < nx - 1) {
                // Lanes whose neighbour pair is in another warp (or block) load it.
                if (s == 0 && (lane == 0 || threadIdx.x == 0)) {
                    left = v[n - 1];
                    cleft = code[n - 1];
                }
                if (s == 1 && (lane == 31 || threadIdx.x == ES_BX - 1)) {
                    right = v[n + 2];
                    cright = code[n + 2];
                }
                const real vxm = s ? vc.x : left, vxp = s ? right : vc.y;
                const int cxm = s ? cc.x : cleft, cxp = s ? cright : cc.y;
                const int c = pick(cc, s);
                const real e = se[c];
                const real axp = (e + se[cxp]) * (s ? xp1 : xp0);
                const real axm = (e + se[cxm]) * (s ? xm1 : xm0);
                const real ayp = (e + se[pick(cN, s)]) * yp;
                const real aym = (e + se[pick(cs, s)]) * ym;
                const real azp = (e + se[pick(cn, s)]) * rzp[k];
                const real azm = (e + se[pick(cm, s)]) * rzm[k];
                const real sum = axp * vxp + axm * vxm + ayp * pick(vN, s) + aym * pick(vs, s) +
                                 azp * pick(vn, s) + azm * pick(vm, s);
                const real den = axp + axm + ayp + aym + azp + azm;
                const real qq = has_qnode ? qnode[n + s] : q;
                const real old = pick(vc, s);
                const real res = omega * ((sum + qq) / den - old);
                if (!sf[c]) {
                    const real nv = old + res;
                    v[n + s] = nv;
                    res2 += (double)res * (double)res;
                    v2 += (double)nv * (double)nv;
                }
            }
            vm = vc; cm = cc;
            vc = vn; cc = cn;
            vn = vnn; cn = cnn;
        }
    }

    double sums[2] = {res2, v2};
    double block[2];
    for (int t = 0; t < 2; ++t) {
        block[t] = block_sum(sums[t]);
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

// Zero normal field on the box faces: a free face node of colour oe copies its inner
// neighbour (the study's order: x faces, then y, then z: a node on several faces takes
// the first). The neighbour is of the other colour, so this launch and es_sweep of the
// same colour commute. Launched before es_sweep of its colour, so an iteration's four
// launches all see the same stop flag. blockIdx.z is the face, threads cover (a, b), its
// two in-plane indices (fastest first).
extern "C" __global__ void es_faces(real* __restrict__ v, const unsigned char* __restrict__ code,
                                    const unsigned char* __restrict__ cls_fixed, int nx, int ny,
                                    int nz, int pitch, int oe, const u64* __restrict__ ctl) {
    if (((volatile const u64*)ctl)[1] != 0) return;
    const int f = blockIdx.z, axis = f >> 1, high = f & 1;
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    const int b = blockIdx.y * blockDim.y + threadIdx.y;
    int i, j, k;
    if (axis == 0) { i = high ? nx - 1 : 0; j = a; k = b; }
    else if (axis == 1) { i = a; j = high ? ny - 1 : 0; k = b; }
    else { i = a; j = b; k = high ? nz - 1 : 0; }
    if (i >= nx || j >= ny || k >= nz || ((i + j + k + oe) & 1)) return;
    // Earlier faces own shared edges and corners.
    if (axis >= 1 && (i == 0 || i == nx - 1)) return;
    if (axis == 2 && (j == 0 || j == ny - 1)) return;
    const size_t nj = (size_t)pitch, nk = nj * ny;
    const size_t n = (size_t)k * nk + (size_t)j * nj + ES_OFF + i;
    if (cls_fixed[code[n]]) return;
    const size_t step = axis == 0 ? 1 : axis == 1 ? nj : nk;
    v[n] = high ? v[n - step] : v[n + step];
}
