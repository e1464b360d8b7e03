// Red-black SOR for div(eps0 epsr grad V) = -rho (seed 003), compiled with
// -Dreal=float|double, ES_BX x ES_BY threads per block, ES_BX a multiple of 32.
//
// Device layout: colour-split. Node (i, j, k) has colour (i + j + k) & 1 and lives in
// that colour's array at index (k*ny + j)*ph + (i >> 1): each row holds its nodes of one
// colour, compacted. A sweep of colour C then reads and writes whole rows of C and reads
// whole rows of the other colour D: per iteration 3 values + 2 class bytes per node
// cross DRAM, where the interleaved layout moves 4 values (every sector of V is read and
// written back by both colours). In a row of parity s = (j + k) & 1 the C node at compact
// h is i = 2h + o, o = (C + s) & 1, and its D neighbours are: in the rows j±1 and the
// planes k±1 the D node at the same h; in its own row the D nodes at h - 1 + o and h + o.
// Each colour array has nz + 1 planes: the last pads the reads ahead past the top face.
//
// One byte per node, `code`, indexes a class table of (epsr, held): the study's
// idVolt/idEpsr in one byte. Held nodes (electrodes, fixed faces) compute an update and
// keep `old`; faces are updated by es_faces, so the interior sweep has no face branch.
//
// es_sweep updates the interior nodes of one colour. Thread (tx, j) owns compact column
// h of row j and marches up z through a chunk of planes; o alternates with k, so two
// planes per trip make it a compile-time constant. The D values at h on planes k-1, k,
// k+1 ride in registers (one load per plane, prefetched a plane ahead); the own-row
// neighbour at h - 1 + o or h + o comes from the adjacent lane by shuffle; rows j±1 by
// loads (L1). No value read is of the colour being written except the node's own, so no
// read races a write. The update is the CPU engine's, operation for operation (no
// contraction: --fmad=false), so the engines agree bit for bit per node.

#ifndef ES_BX
#define ES_BX 32
#endif
#ifndef ES_BY
#define ES_BY 8
#endif
#ifndef ES_MINB
#define ES_MINB 4
#endif

// A class: epsr, and 1 when the voltage is held (else 0); one shared-memory load.
struct __align__(2 * sizeof(real)) es_class { real eps, held; };

// What a plane's update reads besides the z-stream: the node's V, class and charge term,
// the D values and classes of rows j±1, and (lanes at a warp edge) the own-row neighbour
// the shuffle cannot give. Loaded one plane ahead, so their latency hides behind a plane.
struct Reads {
    real old, ds, dN, q, xe;
    int cl, cs, cN, xec;
};

// What one thread carries up its column: the D values at h on planes k-1, k, k+1, epsr
// of the first two and the class of the third, the reads of plane k, the index of
// (h, j, k) in a colour array, its residual sums.
struct Column {
    real dm, dc, dn;
    real em, ec;
    int cn;
    Reads r;
    unsigned n;
    double res2, v2;
};

struct Sweep {
    real* vc; const unsigned char* cc; const real* qc;      // colour C
    const real* vd; const unsigned char* cd;                // colour D
    const es_class* cls;
    int has_qnode; real q, omega;
    const real* rzp; const real* rzm;
    real xp0, xm0, xp1, xm1, yp, ym;
    unsigned hj, hk;     // row and plane strides of a colour array
    bool in0, in1;       // node 2h + o interior in x and y, for o = 0, 1
    bool edge_left, edge_right;  // the lane loads its own-row neighbour (warp edge)
};

// The reads of the plane at index m, whose node is 2h + O.
template <int O>
__device__ __forceinline__ Reads reads(const Sweep& w, unsigned m) {
    Reads r;
    r.old = w.vc[m];
    r.cl = w.cc[m];
    r.ds = w.vd[m - w.hj];
    r.dN = w.vd[m + w.hj];
    r.cs = w.cd[m - w.hj];
    r.cN = w.cd[m + w.hj];
    r.q = w.has_qnode ? w.qc[m] : w.q;
    // The own-row neighbour other than the z-stream's: at h - 1 (O = 0) or h + 1 (O = 1).
    r.xe = 0; r.xec = 0;
    if (O ? w.edge_right : w.edge_left) {
        const unsigned x = O ? m + 1 : m - 1;
        r.xe = w.vd[x];
        r.xec = w.cd[x];
    }
    return r;
}

// One plane: the update of node 2h + O, then the planes shift down.
template <int O>
__device__ __forceinline__ void plane(const Sweep& w, Column& c, int k) {
    const unsigned n = c.n, m = n + w.hk;
    const real dnn = w.vd[m + w.hk];
    const int cnn = w.cd[m + w.hk];
    const Reads next = reads<1 - O>(w, m);
    const Reads& r = c.r;
    const real en = w.cls[c.cn].eps;
    real xo, exo;
    if (O == 0) {
        xo = __shfl_up_sync(0xffffffffu, c.dc, 1);
        exo = __shfl_up_sync(0xffffffffu, c.ec, 1);
        if (w.edge_left) { xo = r.xe; exo = w.cls[r.xec].eps; }
    } else {
        xo = __shfl_down_sync(0xffffffffu, c.dc, 1);
        exo = __shfl_down_sync(0xffffffffu, c.ec, 1);
        if (w.edge_right) { xo = r.xe; exo = w.cls[r.xec].eps; }
    }
    if (O ? w.in1 : w.in0) {
        const real vxm = O ? c.dc : xo, vxp = O ? xo : c.dc;
        const real exm = O ? c.ec : exo, exp = O ? exo : c.ec;
        const es_class me = w.cls[r.cl];
        const real e = me.eps;
        const real axp = (e + exp) * (O ? w.xp1 : w.xp0);
        const real axm = (e + exm) * (O ? w.xm1 : w.xm0);
        const real ayp = (e + w.cls[r.cN].eps) * w.yp;
        const real aym = (e + w.cls[r.cs].eps) * w.ym;
        const real azp = (e + en) * w.rzp[k];
        const real azm = (e + c.em) * w.rzm[k];
        const real sum =
            axp * vxp + axm * vxm + ayp * r.dN + aym * r.ds + azp * c.dn + azm * c.dm;
        const real den = axp + axm + ayp + aym + azp + azm;
        const real old = r.old;
        const real res = w.omega * ((sum + r.q) / den - old);
        if (me.held == (real)0) {
            const real nv = old + res;
            w.vc[n] = nv;
            c.res2 += (double)res * (double)res;
            c.v2 += (double)nv * (double)nv;
        }
    }
    c.dm = c.dc; c.em = c.ec;
    c.dc = c.dn; c.ec = en;
    c.dn = dnn; c.cn = cnn;
    c.r = next;
    c.n = m;
}

// Planes k0 .. k1-1, the first with offset O0.
template <int O0>
__device__ __forceinline__ void march(const Sweep& w, Column& c, int k0, int k1) {
    int k = k0;
    for (; k + 1 < k1; k += 2) {
        plane<O0>(w, c, k);
        plane<1 - O0>(w, c, k + 1);
    }
    if (k < k1) plane<O0>(w, c, k);
}

// ctl[0] = iterations done, ctl[1] = stop flag (1 converged, 2 non-finite); acc holds
// colour 0's sums (res^2, V^2) until colour 1 of the same iteration adds its own.
// vc, cc, qc: the arrays of the colour swept (oe); vd, cd: the other colour's.
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_sweep(real* __restrict__ vc, const real* __restrict__ vd,
         const unsigned char* __restrict__ cc, const unsigned char* __restrict__ cd,
         const real* __restrict__ classes, const real* __restrict__ qc, int has_qnode, real q,
         const real* __restrict__ rxp, const real* __restrict__ rxm,
         const real* __restrict__ ryp, const real* __restrict__ rym,
         const real* __restrict__ rzp, const real* __restrict__ rzm,
         int nx, int ny, int nz, int ph, int planes, int oe, real omega, double tol,
         u64 iteration, double* __restrict__ partials,
         unsigned int* __restrict__ ticket, u64* __restrict__ ctl, double* __restrict__ acc,
         double* __restrict__ hist, unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;
    __shared__ es_class cls[256];
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    for (int t = tid; t < 256; t += ES_BX * ES_BY) {
        cls[t].eps = classes[2 * t];
        cls[t].held = classes[2 * t + 1];
    }
    __syncthreads();

    // Threads off the mesh still walk the planes: their lanes feed the shuffles, so in x
    // they read their own (valid) compact column; only whole off-mesh rows are clamped.
    const int h = min((int)(blockIdx.x * ES_BX + threadIdx.x), ph - 1);
    const int j = 1 + blockIdx.y * ES_BY + threadIdx.y;
    const int k0 = 1 + blockIdx.z * planes;
    const int k1 = min(k0 + planes, nz - 1);
    const bool row = j < ny - 1;
    const int jr = row ? j : 1;
    const int lane = threadIdx.x & 31;
    Sweep w;
    w.vc = vc; w.cc = cc; w.qc = qc;
    w.vd = vd; w.cd = cd;
    w.cls = cls;
    w.has_qnode = has_qnode; w.q = q; w.omega = omega;
    w.rzp = rzp; w.rzm = rzm;
    const int i0 = 2 * h, i0c = min(max(i0, 1), nx - 2), i1c = min(i0 + 1, nx - 2);
    w.xp0 = rxp[i0c]; w.xm0 = rxm[i0c]; w.xp1 = rxp[i1c]; w.xm1 = rxm[i1c];
    w.yp = ryp[jr]; w.ym = rym[jr];
    w.hj = ph; w.hk = (unsigned)ph * ny;
    w.in0 = row && i0 >= 1 && i0 <= nx - 2;
    w.in1 = row && i0 + 1 <= nx - 2;
    w.edge_left = lane == 0;
    w.edge_right = lane == 31;

    Column c;
    c.res2 = 0.0; c.v2 = 0.0;
    if (k0 < k1) {
        c.n = ((unsigned)k0 * ny + jr) * ph + h;
        c.dm = w.vd[c.n - w.hk]; c.dc = w.vd[c.n]; c.dn = w.vd[c.n + w.hk];
        c.em = cls[w.cd[c.n - w.hk]].eps; c.ec = cls[w.cd[c.n]].eps;
        c.cn = w.cd[c.n + w.hk];
        // o = (C + s) & 1 with s = (j + k) & 1; from j, not jr: every lane of a warp (one
        // row: ES_BX is a multiple of 32) takes the same branch, so the shuffles inside
        // see the whole warp.
        if ((oe + j + k0) & 1) {
            c.r = reads<1>(w, c.n);
            march<1>(w, c, k0, k1);
        } else {
            c.r = reads<0>(w, c.n);
            march<0>(w, c, k0, k1);
        }
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
extern "C" __global__ void es_faces(real* __restrict__ vc, const real* __restrict__ vd,
                                    const unsigned char* __restrict__ cc,
                                    const real* __restrict__ classes, int nx, int ny, int nz,
                                    int ph, int oe, const u64* __restrict__ ctl) {
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
    const size_t n = ((size_t)k * ny + j) * ph + (i >> 1);
    if (classes[2 * cc[n] + 1] != (real)0) return;
    // The inner neighbour, of the other colour.
    const int d = high ? -1 : 1;
    size_t m;
    if (axis == 0) m = n - (i >> 1) + ((i + d) >> 1);
    else if (axis == 1) m = n + (ptrdiff_t)d * ph;
    else m = n + (ptrdiff_t)d * ph * ny;
    vc[n] = vd[m];
}
