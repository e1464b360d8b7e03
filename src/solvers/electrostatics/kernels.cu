// Red-black SOR for div(eps0 epsr grad V) = -rho (seed 003), compiled with
// -Dreal=float|double, ES_BX x ES_BY threads per block, ES_BX a multiple of 32.
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

template <int S> __device__ __forceinline__ real at(real_pair p) { return S ? p.y : p.x; }
template <int S> __device__ __forceinline__ int at(uchar2 p) { return S ? p.y : p.x; }

// What one thread carries up its column of pairs: planes k-1, k, k+1 (and the prefetched
// k+2) of V and the class bytes, pointers at plane k, and its residual sums.
struct Column {
    real_pair vm, vc, vn;
    uchar2 cm, cc, cn;
    const real_pair* pv;     // V pair at plane k
    const uchar2* pc;        // class pair at plane k
    const real* pq;          // per-node charge at the pair's first node, plane k
    double res2, v2;
};

struct Sweep {
    const real* se; const unsigned char* sf;
    int has_qnode; real q, omega;
    const real* rzp; const real* rzm;
    real xp0, xm0, xp1, xm1, yp, ym;
    int hj;        // pairs per row
    size_t hk;     // pairs per plane
    int edge_left, edge_right;
    bool row;
};

// One plane of a column: the update of the pair's node S (compile-time, so no selects),
// then the planes shift down. `last` = no plane k+2 inside the mesh to prefetch.
template <int S>
__device__ __forceinline__ void plane(const Sweep& w, Column& c, int k, bool last) {
    const real_pair* pnn = last ? c.pv + w.hk : c.pv + 2 * w.hk;
    const real_pair vnn = *pnn;
    const uchar2 cnn = c.pc[pnn - c.pv];
    const real_pair vs = c.pv[-w.hj], vN = c.pv[w.hj];
    const uchar2 cs = c.pc[-w.hj], cN = c.pc[w.hj];
    // x-neighbours: the own pair's other node, and the adjacent pair's near node (from
    // the adjacent lane; lanes at a warp or block edge load it).
    real xo; int cxo;
    if (S == 0) {
        xo = __shfl_up_sync(0xffffffffu, c.vc.y, 1);
        cxo = __shfl_up_sync(0xffffffffu, (int)c.cc.y, 1);
    } else {
        xo = __shfl_down_sync(0xffffffffu, c.vc.x, 1);
        cxo = __shfl_down_sync(0xffffffffu, (int)c.cc.x, 1);
    }
    if (w.row && (S == 0 || w.edge_right >= 0)) {
        const real* pr = (const real*)c.pv;
        const unsigned char* pcr = (const unsigned char*)c.pc;
        if (S == 0 && w.edge_left) { xo = pr[-1]; cxo = pcr[-1]; }
        if (S == 1 && w.edge_right > 0) { xo = pr[2]; cxo = pcr[2]; }
        const real vxm = S ? c.vc.x : xo, vxp = S ? xo : c.vc.y;
        const int cxm = S ? c.cc.x : cxo, cxp = S ? cxo : c.cc.y;
        const int cl = at<S>(c.cc);
        const real e = w.se[cl];
        const real axp = (e + w.se[cxp]) * (S ? w.xp1 : w.xp0);
        const real axm = (e + w.se[cxm]) * (S ? w.xm1 : w.xm0);
        const real ayp = (e + w.se[at<S>(cN)]) * w.yp;
        const real aym = (e + w.se[at<S>(cs)]) * w.ym;
        const real azp = (e + w.se[at<S>(c.cn)]) * w.rzp[k];
        const real azm = (e + w.se[at<S>(c.cm)]) * w.rzm[k];
        const real sum = axp * vxp + axm * vxm + ayp * at<S>(vN) + aym * at<S>(vs) +
                         azp * at<S>(c.vn) + azm * at<S>(c.vm);
        const real den = axp + axm + ayp + aym + azp + azm;
        const real qq = w.has_qnode ? c.pq[S] : w.q;
        const real old = at<S>(c.vc);
        const real res = w.omega * ((sum + qq) / den - old);
        if (!w.sf[cl]) {
            const real nv = old + res;
            ((real*)c.pv)[S] = nv;
            c.res2 += (double)res * (double)res;
            c.v2 += (double)nv * (double)nv;
        }
    }
    c.vm = c.vc; c.cm = c.cc;
    c.vc = c.vn; c.cc = c.cn;
    c.vn = vnn; c.cn = cnn;
    c.pv += w.hk;
    c.pc += w.hk;
    c.pq += 2 * w.hk;
}

// Planes k0 .. k1-1, the first with node S0 of the pair: two planes per trip, so each
// trip's nodes are known at compile time.
template <int S0>
__device__ __forceinline__ void march(const Sweep& w, Column& c, int k0, int k1, int nz) {
    int k = k0;
    for (; k + 1 < k1; k += 2) {
        plane<S0>(w, c, k, k + 2 > nz - 1);
        plane<1 - S0>(w, c, k + 1, k + 3 > nz - 1);
    }
    if (k < k1) plane<S0>(w, c, k, k + 2 > nz - 1);
}

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
    const int ic = min(i0, nx - 2);
    const int lane = threadIdx.x & 31;
    Sweep w;
    w.se = se; w.sf = sf;
    w.has_qnode = has_qnode; w.q = q; w.omega = omega;
    w.rzp = rzp; w.rzm = rzm;
    w.xp0 = rxp[ic]; w.xm0 = rxm[ic]; w.xp1 = rxp[ic + 1]; w.xm1 = rxm[ic + 1];
    w.yp = ryp[jr]; w.ym = rym[jr];
    w.hj = pitch >> 1; w.hk = nk >> 1;
    w.row = row;
    w.edge_left = lane == 0 || threadIdx.x == 0;
    // Node 2p+2 is interior (>= 0), and its right neighbour pair is in another lane
    // group (> 0); -1: node 2p+2 is the face nx-1.
    w.edge_right = i0 + 1 < nx - 1 ? (lane == 31 || threadIdx.x == ES_BX - 1) : -1;

    Column c;
    c.res2 = 0.0; c.v2 = 0.0;
    if (k0 < k1) {
        const size_t n = (size_t)k0 * nk + base;
        c.pv = (const real_pair*)v + (n >> 1);
        c.pc = (const uchar2*)code + (n >> 1);
        c.pq = qnode + (has_qnode ? n : 0);
        c.vm = c.pv[-(ptrdiff_t)w.hk]; c.vc = c.pv[0]; c.vn = c.pv[w.hk];
        c.cm = c.pc[-(ptrdiff_t)w.hk]; c.cc = c.pc[0]; c.cn = c.pc[w.hk];
        // From j, not jr: every lane of a warp (one row: ES_BX is a multiple of 32) takes
        // the same branch, so the shuffles inside see the whole warp.
        if ((j + k0 + oe + 1) & 1) march<1>(w, c, k0, k1, nz);
        else march<0>(w, c, k0, k1, nz);
    }
    const double res2 = c.res2, v2 = c.v2;

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
