// Red-black SOR for div(eps0 epsr grad V) = -rho (seed 003), compiled with
// -Dreal=float|double, ES_BX x ES_BY threads per block, ES_BX a multiple of 32.
//
// Device layout: colour-split. Node (i, j, k) has colour (i + j + k) & 1 and lives in
// that colour's array at index ES_SHIFT + (k - kbase)*ES_HK + j*ES_HJ + ((i + ES_XOFF) >> 1)
// (ES_HJ = ph, the row pitch; ES_HK = ny*ph, or 2*ny*ph in a slab's buffer, where both
// colours of a plane sit side by side; kbase = 0 but in slabs): each row holds its
// nodes of one colour, compacted. A sweep of colour C then reads and writes whole rows
// of C and reads whole rows of the other colour D: per iteration 3 values + 2 class bytes
// per node cross DRAM, where the interleaved layout moves 4 values (every sector of V is
// read and written back by both colours). In a row of parity s = (j + k) & 1 the C node
// at compact h is i = 2h + o - ES_XOFF, o = (C + s + ES_XOFF) & 1, and its D neighbours
// are: in the rows j±1 and the planes k±1 the D node at the same h; in its own row the D
// nodes at h - 1 + o and h + o. ES_XOFF = 1 (es_sweep, es_persist) pairs the nodes (1, 2),
// (3, 4), ...: a row's interior then fills ceil((nx - 2)/2) columns, one fewer than the
// pairs (0, 1), (2, 3), ... of ES_XOFF = 0 (which es_fused and es_staged assume) when nx
// is even; the sweeps' threads start at column ES_XOFF.
// Each colour array has nz + 2 planes (a slab's: its window's + 2): the last two pad the
// reads ahead past the top face.
//
// One byte per node, `code`, indexes a class table of (epsr, held): the study's
// idVolt/idEpsr in one byte (4 bits where they fit, ES_CBITS). Held nodes (electrodes,
// fixed faces) compute an update and keep `old`; face nodes are copied by es_faces or, on
// one device, beside the sweep (ES_FACES), so the update has no face branch.
//
// es_sweep updates the interior nodes of one colour. Thread (tx, j) owns compact column
// h of row j and marches up z through a chunk of planes; o alternates with k, so two
// planes per trip make it a compile-time constant. The D values at h on planes k-1, k,
// k+1 ride in registers (one load per plane, prefetched a plane ahead); the other own-row
// neighbour (h - 1 + o or h + o) and rows j±1 by loads (the warp's own lines, L1). Two
// planes share one set of addresses, and the update has no branch: lanes off the mesh
// and held nodes compute and store nothing (286 -> 211 SASS instructions per two planes
// at 512^3 f32, docs/PERFORMANCE.md). No value read is of the colour being written
// except the node's own, so no read races a write (an off-mesh lane's read of a face node
// that ES_FACES writes is never used). The update is the CPU engine's, operation for
// operation (no contraction: --fmad=false), so the engines agree bit for bit per node.

#ifndef ES_BX
#define ES_BX 32
#endif
#ifndef ES_BY
#define ES_BY 8
#endif
#ifndef ES_MINB
#define ES_MINB 4
#endif
#ifndef ES_XOFF
#define ES_XOFF 0
#endif
// Row and plane strides of a colour array, in values: compile-time constants (the engine
// compiles per mesh) so that a plane's loads are one address and immediate offsets.
#ifndef ES_HJ
#define ES_HJ 288
#endif
#ifndef ES_HK
#define ES_HK (ES_HJ * 512)
#endif
// Entries of the shared table of z coefficients: a sweep's chunk has at most this many planes.
#ifndef ES_ZCAP
#define ES_ZCAP 256
#endif
// Planes ahead of its sweep that each warp asks L2 to fetch its rows (0: none). The
// sweep's own loads run one plane ahead, which leaves too few bytes in flight per
// multiprocessor in f32 (512^3: 0.91 ms per iteration with no arithmetic at all, 0.83
// with this prefetch, docs/PERFORMANCE.md).
#ifndef ES_PF
#define ES_PF 4
#endif
// The prefetch's sectors of one plane fit in 16 lanes (f32: V of both colours, the class
// bytes and the charge take 3·4 + 2).
#define ES_PF_SPLIT (3 * (int)sizeof(real) + 2 <= 16)
// Elements before row 0 of each array (with ES_XOFF = 1: column 1 of every row starts a
// 128-byte line).
#ifndef ES_SHIFT
#define ES_SHIFT 0
#endif

// Bits per class code: 8 (each colour's array of codes, a byte per node), or 4 where a
// mesh has at most 16 classes (the per-colour and persistent sweeps): one array of bytes
// for both colours, compact index n holding colour 0's code in bits 0-3 and colour 1's in
// bits 4-7; both "colours' arrays" of codes are then that array. A sweep reads it once
// (per iteration 1 byte of codes per node instead of 2: 512^3 f32, 13 B/node instead of
// 14) as one stream, not two. The class table then has ES_TABLE = 512 entries, 256 per
// colour: entry 256·oe + b is the class of colour oe's code in byte b, so a code is
// looked up from its byte with no shift or mask.
#ifndef ES_CBITS
#define ES_CBITS 8
#endif
#define ES_TABLE (ES_CBITS == 4 ? 512 : 256)

// The class-table entry of colour oe's node at compact index n of its array of codes.
__device__ __forceinline__ int code_at(const unsigned char* c, size_t n, int oe) {
    return (ES_CBITS == 4 ? 256 * oe : 0) + c[n];
}

// Slab sweeps (ES_SUM_RANGE = 1) sweep the planes kfirst..kend-1 but add to the residual
// sums only the nodes of the planes sfirst..send-1 (two more launch parameters): red then
// covers a slab's owned planes and one beyond each end in one launch, and the planes
// beyond, which the neighbours own, do not count twice: a flag per plane in shared memory
// beside the plane's z coefficients says whether it counts (a test of k against the range
// held the range in two registers at the sweep's 64-register cap and cost a slab's red
// sweep about 2 %, docs/PERFORMANCE.md). Whole-mesh sweeps count all. With
// ES_FACES a slab's sweep copies the face nodes of the planes ffirst..fend-1 (two more):
// the swept planes kfirst..kend-1 are their interior ones.
#ifndef ES_SUM_RANGE
#define ES_SUM_RANGE 0
#endif

// A class: epsr, and 1 when the voltage is held (else 0); one shared-memory load.
struct __align__(2 * sizeof(real)) es_class { real eps, held; };

// The z coefficients (rzp, rzm) of a plane: one shared-memory load per plane instead of
// two global loads and their address arithmetic.
struct __align__(2 * sizeof(real)) es_z { real p, m; };

// ω (num · (1 / den) − old), the SOR step of every sweep kernel (and of the CPU engine, so
// both round alike). A reciprocal and a product, not a division: IEEE division hands
// zero and tiny numerators to a slow subroutine, and the nodes ahead of the potential's
// front hold exactly such values for hundreds of iterations, whereas den, a sum of
// positive face coefficients, is always a normal number, so its reciprocal never leaves
// the fast path (docs/PERFORMANCE.md, "the SOR step by a reciprocal").
__device__ __forceinline__ real sor_residual(real num, real den, real old, real omega) {
    return omega * (num * ((real)1 / den) - old);
}

// The class table into shared memory (the caller synchronises before reading it).
__device__ __forceinline__ void load_classes(es_class* cls, const real* classes, int tid,
                                             int entries = 256) {
    for (int t = tid; t < entries; t += ES_BX * ES_BY) {
        cls[t].eps = classes[2 * t];
        cls[t].held = classes[2 * t + 1];
    }
}

// What a plane's update reads besides the z-stream: the node's V, class and charge term,
// the D values and classes of rows j±1, and the own-row neighbour the z-stream does not
// hold. Loaded one plane ahead, so their latency hides behind a plane.
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

// ES_QNODE (0 or 1, when the engine defines it): whether a per-node charge array is read,
// fixed at compile time so the sweep carries neither the branch nor the pointer.
#ifdef ES_QNODE
#define ES_HAS_Q(w) (ES_QNODE)
#else
#define ES_HAS_Q(w) ((w).has_qnode)
#endif

// ES_FACES = 1 (the per-colour engines, one device or slabs, where the mesh has free face
// nodes): es_sweep also does es_faces' work for its colour, which commutes with it (see
// es_faces). Their own launch cost 22.5 us twice per 512^3 f32 iteration on the H100,
// against 361 us per sweep, mostly for the x faces' scattered sectors; done by the sweep's
// threads when a block starts, the same. So the x-face nodes of the swept rows and planes
// are copied by the lane that passes their inner neighbour (its own-column D node, in a
// register; the face node's sectors are beside the row's), in the blocks that have such
// lanes only (the others run the plain sweep: XF in march), and the rest (the y and z
// faces, whole rows, and the x faces' edges) by more layers of blocks in z (about four
// face entries a thread: face_layers in cuda.rs), which the device starts last, in the
// slots the sweep's last wave leaves idle.
#ifndef ES_FACES
#define ES_FACES 0
#endif
// Layers of blocks in z after the sweep's that copy the rest (ES_FACES).
#ifndef ES_FACE_LAYERS
#define ES_FACE_LAYERS 1
#endif
#if ES_FACES && ES_XOFF != 1
#error "ES_FACES assumes the pairs (1, 2), (3, 4), ... of ES_XOFF = 1"
#endif
// nx & 1 (with ES_FACES).
#ifndef ES_NX_ODD
#define ES_NX_ODD 0
#endif

struct Sweep {
    real* vc; const unsigned char* cc; const real* qc;      // colour C
    const real* vd; const unsigned char* cd;                // colour D
    const es_class* clc; // the class table of C's codes
    const es_class* cls; // of D's
    int has_qnode; real q, omega;
    const es_z* zt;      // the chunk's z coefficients, indexed by the plane k
    real xp0, xm0, xp1, xm1, yp, ym;
    bool in0, in1;       // node 2h + o interior in x and y, for o = 0, 1
    // The lane's share of its warp's L2 prefetch (one 32-byte sector of a row segment of
    // V, the other colour's V, the class bytes or the charge, ES_PF planes above node
    // index n: pf + n * pf_size, pf_size in bytes per value), when pf_on.
    const char* pf; unsigned pf_size; bool pf_on;
#if ES_FACES
    // The lane copies the x-face node of colour C at index n - 1 on its planes of offset 1
    // (xf & 1: column 1, node 0) and the one at n + 1 - ES_NX_ODD on its planes of offset
    // ES_NX_ODD (xf & 2: the column of node nx - 2; node nx - 1 is in the next column when
    // nx is even).
    int xf;
#endif
};

// The arrays at one index: a plane's reads are these pointers plus constant offsets.
struct At {
    real* vc; const unsigned char* cc; const real* qc;
    const real* vd; const unsigned char* cd;
};

__device__ __forceinline__ At at(const Sweep& w, unsigned n) {
    return {w.vc + n, w.cc + n, w.qc + n, w.vd + n, w.cd + n};
}

// The reads of the plane P planes above p (P = 0 or 1), whose node is 2h + O.
template <int O, int P>
__device__ __forceinline__ Reads reads(const Sweep& w, const At& p) {
    constexpr int z = P * ES_HK;
    Reads r;
    r.old = p.vc[z];
    r.cl = p.cc[z];
    r.ds = p.vd[z - ES_HJ];
    r.dN = p.vd[z + ES_HJ];
    r.cs = p.cd[z - ES_HJ];
    r.cN = p.cd[z + ES_HJ];
    r.q = ES_HAS_Q(w) ? p.qc[z] : w.q;
    // The own-row neighbour other than the z-stream's: at h - 1 (O = 0) or h + 1 (O = 1).
    // Every lane loads it (the warp's own lines, in L1): no shuffle, no edge lanes.
    constexpr int x = O ? z + 1 : z - 1;
    r.xe = p.vd[x];
    r.xec = p.cd[x];
    return r;
}

// The x-face node of colour C at p + at takes v unless it is held (ES_FACES).
__device__ __forceinline__ void x_face(const Sweep& w, const At& p, int at, real v) {
    if (w.clc[p.cc[at]].held == (real)0) p.vc[at] = v;
}

// One plane: the update of node 2h + O (XF: and the lane's x-face nodes), then the planes
// shift down.
template <int O, int P, bool XF>
__device__ __forceinline__ void plane(const Sweep& w, Column& c, const At& p, const es_z* zk) {
    const real dnn = p.vd[(P + 2) * ES_HK];
    const int cnn = p.cd[(P + 2) * ES_HK];
    const Reads next = reads<1 - O, P + 1>(w, p);
    const Reads& r = c.r;
    const real en = w.cls[c.cn].eps;
    const real xo = r.xe, exo = w.cls[r.xec].eps;
    {
        const real vxm = O ? c.dc : xo, vxp = O ? xo : c.dc;
        const real exm = O ? c.ec : exo, exp = O ? exo : c.ec;
        const es_class me = w.clc[r.cl];
        const real e = me.eps;
        const real axp = (e + exp) * (O ? w.xp1 : w.xp0);
        const real axm = (e + exm) * (O ? w.xm1 : w.xm0);
        const real ayp = (e + w.cls[r.cN].eps) * w.yp;
        const real aym = (e + w.cls[r.cs].eps) * w.ym;
        const es_z z = zk[P];
        const real azp = (e + en) * z.p;
        const real azm = (e + c.em) * z.m;
        const real sum =
            axp * vxp + axm * vxm + ayp * r.dN + aym * r.ds + azp * c.dn + azm * c.dm;
        const real den = axp + axm + ayp + aym + azp + azm;
        const real old = r.old;
        const real res = sor_residual(sum + r.q, den, old, w.omega);
        // Off-mesh lanes and held nodes compute too and store nothing (predicated, no
        // branch). The sums take an FMA each: their order is the GPU's own anyway.
        const bool upd = (O ? w.in1 : w.in0) && me.held == (real)0;
        const real nv = old + res;
        if (upd) p.vc[P * ES_HK] = nv;
        bool sums = upd;
#if ES_SUM_RANGE
        // Whether the node's plane counts: the entry ES_ZCAP past the plane's z
        // coefficients (a shared load at an immediate offset, no register held for the
        // range).
        sums = sums && zk[ES_ZCAP + P].p != (real)0;
#endif
        if (sums) {
            c.res2 = fma((double)res, (double)res, c.res2);
            c.v2 = fma((double)nv, (double)nv, c.v2);
        }
    }
#if ES_FACES
    // c.dc, the lane's D node on plane k, is the inner neighbour of those x-face nodes.
    if (XF && O == 1 && (w.xf & 1)) x_face(w, p, P * ES_HK - 1, c.dc);
    if (XF && O == ES_NX_ODD && (w.xf & 2)) x_face(w, p, P * ES_HK + 1 - ES_NX_ODD, c.dc);
#endif
    c.dm = c.dc; c.em = c.ec;
    c.dc = c.dn; c.ec = en;
    c.dn = dnn; c.cn = cnn;
    c.r = next;
}

// Pairs of planes k, k + 1 while k + 1 < kend, from one set of addresses (the second's
// offsets are immediates); PF: the warp asks L2 for the planes ES_PF above the pair.
template <int O0, bool PF, bool XF>
__device__ __forceinline__ int march_pairs(const Sweep& w, Column& c, int k, int kend) {
    for (; k + 1 < kend; k += 2) {
        const At p = at(w, c.n);
#if ES_PF
        if (PF && w.pf_on) {
            const char* a = w.pf + (size_t)c.n * w.pf_size;
            asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
            if (!ES_PF_SPLIT)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(a + (size_t)ES_HK * w.pf_size));
        }
#endif
        const es_z* zk = w.zt + k;
        plane<O0, 0, XF>(w, c, p, zk);
        plane<1 - O0, 1, XF>(w, c, p, zk);
        c.n += 2 * ES_HK;
    }
    return k;
}

// Planes k0 .. k1-1, the first with offset O0; the prefetches reach plane k1 at most.
template <int O0, bool XF>
__device__ __forceinline__ void march(const Sweep& w, Column& c, int k0, int k1) {
    int k = k0;
#if ES_PF
    k = march_pairs<O0, true, XF>(w, c, k, k1 - ES_PF + 1);
#endif
    k = march_pairs<O0, false, XF>(w, c, k, k1);
    if (k < k1) plane<O0, 0, XF>(w, c, at(w, c.n), w.zt + k);
}

// march<O0, XF> for the block: XF (its copies of x-face nodes) only in the blocks whose
// lanes have some (two of a row's), so that the others run the plain sweep.
template <int O0>
__device__ __forceinline__ void march_block(const Sweep& w, Column& c, int k0, int k1,
                                            bool xblock) {
    if (ES_FACES && xblock) march<O0, true>(w, c, k0, k1);
    else march<O0, false>(w, c, k0, k1);
}

// The parameters of one colour's sweep: es_sweep and es_staged take the same, so one
// launcher serves both.
#define ES_SWEEP_PARAMS                                                                    \
    real *__restrict__ vc, const real *__restrict__ vd, const unsigned char *__restrict__ cc, \
        const unsigned char *__restrict__ cd, const real *__restrict__ classes,            \
        const real *__restrict__ qc, int has_qnode, real q, const real *__restrict__ rxp,  \
        const real *__restrict__ rxm, const real *__restrict__ ryp,                        \
        const real *__restrict__ rym, const real *__restrict__ rzp,                        \
        const real *__restrict__ rzm, int nx, int ny, int nz, int ph, int planes, int oe,  \
        real omega, double tol, u64 iteration, double *__restrict__ partials,              \
        unsigned int *__restrict__ ticket, u64 *__restrict__ ctl, double *__restrict__ acc, \
        double *__restrict__ hist, unsigned hist_len, int kfirst, int kend, int kbase,      \
        double *__restrict__ slot ES_SUM_PARAMS
#if ES_SUM_RANGE
#define ES_SUM_PARAMS , int sfirst, int send, int ffirst, int fend
#else
#define ES_SUM_PARAMS
#endif

// The grid's (res^2, V^2) sums of a launch: true in thread 0 of the last block to
// finish, with them in total.
__device__ __forceinline__ bool grid_residual_sums(double res2, double v2, double* partials,
                                                   unsigned int* ticket, double (&total)[2]) {
    double sums[2] = {res2, v2};
    double block[2];
    for (int t = 0; t < 2; ++t) {
        block[t] = block_sum(sums[t]);
        __syncthreads();
    }
    return grid_sums_last_block<2>(block, partials, ticket, total);
}

// A history entry for an iteration whose residual was not computed (run::NOT_MEASURED).
#define ES_NOT_MEASURED (-1.0)

// An iteration's verdict from its (res^2, V^2) sums: the relative residual sqrt(res2 / v2)
// (sqrt(res2) where V is 0) into rel; 2 when it is not finite, 1 when it is <= tol,
// else 0. Where the run does not test convergence the host passes tol = -1, so that only
// a non-finite residual stops it (ElectrostaticsProblem::tolerance_after).
__device__ __forceinline__ int residual_verdict(double res2, double v2, double tol,
                                                double& rel) {
    const double r = sqrt(res2), norm = sqrt(v2);
    rel = norm > 0.0 ? r / norm : r;
    if (!(rel == rel) || rel > 1.7976931348623157e308) return 2;
    return rel <= tol ? 1 : 0;
}

// Iteration `iteration` done: its residual into its history slot, the count of
// iterations, and the stop flag when the verdict stops the solve.
__device__ __forceinline__ void record_iteration(double rel, int verdict, u64 iteration,
                                                 u64* ctl, double* hist, unsigned hist_len) {
    hist[iteration % hist_len] = rel;
    ctl[0] = iteration + 1;
    if (verdict) ctl[1] = verdict;
}

// The end of a colour's sweep: the grid's (res^2, V^2) sums; into `slot` when given (a
// slab's sweep: es_record adds up every slab's), else after colour 1 the relative
// residual of the iteration, its history slot, the iteration count and the stop flag.
__device__ __forceinline__ void sweep_record(double res2, double v2, double* partials,
                                             unsigned int* ticket, u64* ctl, double* acc,
                                             double* hist, unsigned hist_len, int oe,
                                             double tol, u64 iteration, double* slot) {
    double total[2];
    if (!grid_residual_sums(res2, v2, partials, ticket, total)) return;
    if (slot) {
        slot[0] = total[0];
        slot[1] = total[1];
        return;
    }
    if (oe == 0) {
        acc[0] = total[0];
        acc[1] = total[1];
        return;
    }
    double rel;
    const int verdict = residual_verdict(acc[0] + total[0], acc[1] + total[1], tol, rel);
    record_iteration(rel, verdict, iteration, ctl, hist, hist_len);
}

// One block's tile of colour oe's sweep: compact columns from bx·ES_BX, rows from
// 1 + by·ES_BY, the z-chunk bz of `planes` (<= ES_ZCAP) planes from plane kfirst (planes
// kfirst..kend-1 are swept; the arrays' plane 0 is plane kbase); adds its nodes' (res², V²)
// to the thread's sums. vc, cc, qc: the arrays of the colour swept; vd, cd: the other
// colour's. zt: ES_ZCAP entries of shared memory (twice that with ES_SUM_RANGE: the
// planes' flags); every thread of the block calls this.
// No __restrict__ on V here: es_persist reads in one phase what other blocks wrote in
// the previous one, so V must not go through the read-only (non-coherent) path there.
// With ES_COLOUR_T the colour is a template parameter (OE = 0 or 1): the class tables'
// colour offsets are then immediates of the shared loads, not an add per code (211 -> 195
// SASS instructions per two planes at 512^3 f32: 741-761 against 756-775 us per
// iteration on the H100). Without it (OE = -1) the colour comes from `oe_rt`: in f64 the
// constant colour spilled more and was 1.5 % slower, and the small meshes' 64x2 sweep
// 4 % slower (docs/PERFORMANCE.md); the engine chooses.
template <int OE>
__device__ __forceinline__ void sweep_tile(real* vc, const real* vd, const unsigned char* cc,
                                           const unsigned char* cd, const es_class* cls,
                                           es_z* zt,
                                           const real* qc, int has_qnode, real q,
                                           const real* rxp, const real* rxm, const real* ryp,
                                           const real* rym, const real* rzp, const real* rzm,
                                           int nx, int ny, int kfirst, int kend, int kbase,
                                           int planes, int oe_rt, real omega, int bx, int by,
                                           int bz, int sfirst, int send, double& res2,
                                           double& v2) {
    const int oe = OE >= 0 ? OE : oe_rt;
    // Threads off the mesh still walk the planes (and store nothing), reading their own
    // (valid) compact column; only whole off-mesh rows are clamped.
    const int h = min((int)(ES_XOFF + bx * ES_BX + threadIdx.x), ES_HJ - 1);
    const int j = 1 + by * ES_BY + threadIdx.y;
    const int k0 = kfirst + bz * planes;
    const int k1 = min(k0 + planes, kend);
    const bool row = j < ny - 1;
    const int jr = row ? j : 1;
    const int lane = threadIdx.x & 31;
    __syncthreads();  // es_persist: the previous tile's sweep is done with zt
    for (int t = threadIdx.x + ES_BX * threadIdx.y; t < k1 - k0; t += ES_BX * ES_BY) {
        zt[t] = {rzp[k0 + t], rzm[k0 + t]};
        // ES_SUM_RANGE: 1 where plane k0 + t counts in the residual sums (see plane()).
        if (ES_SUM_RANGE) zt[ES_ZCAP + t].p = k0 + t >= sfirst && k0 + t < send;
    }
    __syncthreads();
    Sweep w;
    w.vc = vc; w.cc = cc; w.qc = qc;
    w.vd = vd; w.cd = cd;
    w.clc = cls + (ES_CBITS == 4 ? 256 * oe : 0);
    w.cls = cls + (ES_CBITS == 4 ? 256 * (1 - oe) : 0);
    w.has_qnode = has_qnode; w.q = q; w.omega = omega;
    w.zt = zt - k0;
    const int i0 = 2 * h - ES_XOFF, i0c = min(max(i0, 1), nx - 2),
              i1c = min(max(i0 + 1, 1), nx - 2);
    w.xp0 = rxp[i0c]; w.xm0 = rxm[i0c]; w.xp1 = rxp[i1c]; w.xm1 = rxm[i1c];
    w.yp = ryp[jr]; w.ym = rym[jr];
    w.in0 = row && i0 >= 1 && i0 <= nx - 2;
    w.in1 = row && i0 + 1 >= 1 && i0 + 1 <= nx - 2;
    {
        // One 32-byte sector per lane: a warp's row segment of V is S = sizeof(real) sectors
        // (lanes 0..S-1 for this colour, S..2S-1 for the other), its class bytes one sector
        // each (lanes 2S, 2S+1; 4-bit codes: one array, lane 2S), its charge S more (from
        // 2S+2, with a per-node charge).
        constexpr int S = sizeof(real);
        // Two planes per trip: where a plane's sectors take at most 16 lanes (f32), lanes
        // 16..31 ask for the trip's second plane, else each lane asks for both.
        const int l = ES_PF_SPLIT ? lane & 15 : lane;
        int arr, sec;
        if (l < 2 * S) { arr = l / S; sec = l % S; }
        else if (l < 2 * S + 2) { arr = 2 + l - 2 * S; sec = 0; }
        else { arr = 4; sec = l - 2 * S - 2; }
        const char* a = arr == 0   ? (const char*)vc
                        : arr == 1 ? (const char*)vd
                        : arr == 2 ? (const char*)cc
                        : arr == 3 ? (const char*)cd
                                   : (const char*)qc;
        w.pf_size = arr == 2 || arr == 3 ? 1 : S;
        w.pf_on = (l < 2 * S + 2 && !(ES_CBITS == 4 && arr == 3)) ||
                  (has_qnode && l < 3 * S + 2);
        w.pf = a + ((long long)(ES_PF + (lane >> 4) * ES_PF_SPLIT) * ES_HK - lane) * w.pf_size +
               32 * sec;
    }
    bool xblock = false;  // some lane of the block copies x-face nodes
#if ES_FACES
    {
        const int h0 = ES_XOFF + bx * ES_BX, hh = h0 + threadIdx.x;  // unclamped
        const int hd = (nx - 1) >> 1;
        w.xf = row ? (hh == 1) | (hh == hd) << 1 : 0;
        xblock = h0 <= 1 || (h0 <= hd && hd < h0 + ES_BX);
    }
#endif

    Column c;
    c.res2 = 0.0; c.v2 = 0.0;
    if (k0 < k1) {
        c.n = ES_SHIFT + (unsigned)(k0 - kbase) * ES_HK + (unsigned)jr * ES_HJ + h;
        const At p = at(w, c.n);
        c.dm = p.vd[-ES_HK]; c.dc = p.vd[0]; c.dn = p.vd[ES_HK];
        c.em = w.cls[p.cd[-ES_HK]].eps;
        c.ec = w.cls[p.cd[0]].eps;
        c.cn = p.cd[ES_HK];
        // o = (C + s + ES_XOFF) & 1 with s = (j + k) & 1; from j, not jr: every lane of a
        // warp (one row: ES_BX is a multiple of 32) takes the same branch.
        if ((oe + j + k0 + ES_XOFF) & 1) {
            c.r = reads<1, 0>(w, p);
            march_block<1>(w, c, k0, k1, xblock);
        } else {
            c.r = reads<0, 0>(w, p);
            march_block<0>(w, c, k0, k1, xblock);
        }
    }
    res2 += c.res2;
    v2 += c.v2;
}

// A colour as a type, so that one generic lambda can call sweep_tile<0>, <1> or, with
// the colour at run time, <-1>.
template <int C>
struct Colour {
    static constexpr int value = C;
};
#ifndef ES_COLOUR_T
#define ES_COLOUR_T 0
#endif

// Face node (a, b) of face f (see es_faces): whether it is of colour oe, on a plane
// kfirst..kend-1 and not owned by an earlier face (x, then y, then z own shared edges and
// corners); then n, its index (plane 0 of the arrays is plane kbase), and m, its inner
// neighbour's (of the other colour).
__device__ __forceinline__ bool face_at(int nx, int ny, int nz, int kfirst, int kend,
                                        int kbase, int oe, int f, int a, int b, size_t& n,
                                        size_t& m) {
    const int axis = f >> 1, high = f & 1;
    int i, j, k;
    if (axis == 0) { i = high ? nx - 1 : 0; j = a; k = b; }
    else if (axis == 1) { i = a; j = high ? ny - 1 : 0; k = b; }
    else { i = a; j = b; k = high ? nz - 1 : 0; }
    if (i >= nx || j >= ny || k >= nz || k < kfirst || k >= kend || ((i + j + k + oe) & 1))
        return false;
    if (axis >= 1 && (i == 0 || i == nx - 1)) return false;
    if (axis == 2 && (j == 0 || j == ny - 1)) return false;
    n = ES_SHIFT + (size_t)(k - kbase) * ES_HK + (size_t)j * ES_HJ + ((i + ES_XOFF) >> 1);
    const int d = high ? -1 : 1;
    if (axis == 0) m = n - ((i + ES_XOFF) >> 1) + ((i + d + ES_XOFF) >> 1);
    else if (axis == 1) m = n + (ptrdiff_t)d * ES_HJ;
    else m = n + (ptrdiff_t)d * ES_HK;
    return true;
}

// Face node (a, b) of face f (see es_faces) when it is of colour oe, free and on a plane
// kfirst..kend-1: the value of its inner neighbour, into vc and vc2 (whose plane 0 is
// plane kbase).
__device__ __forceinline__ void face_node(real* vc, real* vc2, const real* vd,
                                          const unsigned char* __restrict__ cc,
                                          const real* __restrict__ classes, int nx, int ny,
                                          int nz, int kfirst, int kend, int kbase, int oe,
                                          int f, int a, int b) {
    size_t n, m;
    if (!face_at(nx, ny, nz, kfirst, kend, kbase, oe, f, a, b, n, m)) return;
    if (classes[2 * code_at(cc, n, oe) + 1] != (real)0) return;
    const real v = vd[m];
    vc[n] = v;
    vc2[n] = v;
}

// es_faces' work for colour oe on the planes kf..ke-1 (plane 0 of the arrays is plane
// kbase) as one list of fa·fb entries per face (fa = max(nx, ny), fb = max(ny, ke − kf):
// face f = e / (fa·fb), its in-plane indices (a, b) from e mod fa·fb, a fastest; the x and
// y faces' b counts planes from kf), the z faces only where the planes hold them; the
// entries first, first + stride, ... On the whole mesh (kf = 0, ke = nz) that is the
// 6·fa·max(ny, nz) entries the one-device sweep always took. Without the x-face nodes of
// the rows 1..ny-2 on the planes 1..nz-2 unless `swept_x` (es_sweep's lanes copy those,
// ES_FACES, on the planes they sweep: the interior ones of kf..ke-1). The class table
// `cls` must be visible to the block.
__device__ __forceinline__ void copy_faces(real* vc, const real* vd, const unsigned char* cc,
                                           const es_class* cls, int nx, int ny, int nz,
                                           int kf, int ke, int kbase, int oe, unsigned first,
                                           unsigned stride, bool swept_x) {
    const unsigned fa = max(nx, ny), fb = max(ny, ke - kf);
    const int zlo = kf == 0, zhi = ke == nz;
    const unsigned nface = (4u + zlo + zhi) * fa * fb;
    for (unsigned e = first; e < nface; e += stride) {
        const int r = e % (fa * fb), a = r % fa;
        int f = e / (fa * fb), b = r / fa;
        if (f < 4) b += kf;     // the x and y faces' plane
        else if (!zlo) f = 5;   // the one z face among the planes is the top one
        if (!swept_x && f < 2 && a >= 1 && a <= ny - 2 && b >= 1 && b <= nz - 2) continue;
        size_t n, m;
        if (face_at(nx, ny, nz, kf, ke, kbase, oe, f, a, b, n, m) &&
            cls[code_at(cc, n, oe)].held == (real)0)
            vc[n] = vd[m];
    }
}

// ctl[0] = iterations done, ctl[1] = stop flag (1 converged, 2 non-finite); acc holds
// colour 0's sums (res^2, V^2) until colour 1 of the same iteration adds its own.
// vc, cc, qc: the arrays of the colour swept (oe); vd, cd: the other colour's.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_sweep)
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_sweep(ES_SWEEP_PARAMS) {
    __shared__ es_class cls[ES_TABLE];
    __shared__ es_z zt[(1 + ES_SUM_RANGE) * ES_ZCAP];
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    load_classes(cls, classes, tid, ES_TABLE);
#if __CUDA_ARCH__ >= 900
    // Launched as a programmatic dependent launch (the one-device engine): the next
    // sweep's blocks may take the slots ours leave as the grid drains and load their class
    // table; nothing the previous launch writes (V, the sums' books, the stop flag) is
    // touched before the wait. Without that launch attribute both return at once.
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    if (((volatile u64*)ctl)[1] != 0) return;
    double res2 = 0.0, v2 = 0.0;
#if !ES_SUM_RANGE
    const int sfirst = kfirst, send = kend;  // every swept plane counts
    const int ffirst = 0, fend = nz;         // and it copies the faces of every plane
#endif
#if ES_FACES
    if (blockIdx.z >= gridDim.z - ES_FACE_LAYERS) {
        // The launch's last layers of blocks: the face nodes the lanes do not copy.
        __syncthreads();
        const unsigned layer = gridDim.x * gridDim.y;
        copy_faces(vc, vd, cc, cls, nx, ny, nz, ffirst, fend, kbase, oe,
                   tid + ES_BX * ES_BY *
                             (blockIdx.x + gridDim.x * blockIdx.y +
                              layer * (blockIdx.z - (gridDim.z - ES_FACE_LAYERS))),
                   ES_BX * ES_BY * layer * ES_FACE_LAYERS, false);
    } else
#endif
    {
        const auto tile = [&](auto colour) {
            sweep_tile<decltype(colour)::value>(vc, vd, cc, cd, cls, zt, qc, has_qnode, q, rxp,
                                                rxm, ryp, rym, rzp, rzm, nx, ny, kfirst, kend,
                                                kbase, planes, oe, omega, blockIdx.x,
                                                blockIdx.y, blockIdx.z, sfirst, send, res2, v2);
        };
        if (!ES_COLOUR_T) tile(Colour<-1>{});
        else if (oe) tile(Colour<1>{});
        else tile(Colour<0>{});
    }
    sweep_record(res2, v2, partials, ticket, ctl, acc, hist, hist_len, oe, tol, iteration,
                 slot);
}
#endif

// Zero normal field on the box faces: a free face node of colour oe copies its inner
// neighbour (the study's order: x faces, then y, then z: a node on several faces takes
// the first). The neighbour is of the other colour, so this launch and es_sweep of the
// same colour commute. Launched before es_sweep of its colour, so an iteration's four
// launches all see the same stop flag (the one-device per-colour engine launches none:
// its es_sweep does this work, ES_FACES). blockIdx.z is the face, threads cover (a, b),
// its two in-plane indices (fastest first).
//
// With the fused sweep (es_fused, ping-pong buffers) an iteration is: red faces (vd: the
// black values read, from the input buffer; written to vc and vc2, the input and output
// buffers, since the fused sweep reads them from the one and the next iteration from the
// other), es_fused, black faces (vd: the red values just written, in the output buffer;
// vc = vc2 = the output buffer). `after` >= 0: run only if iteration `after` is done
// (ctl[0] == after + 1), so the black faces of the iteration that converged still run;
// else only while no stop is flagged.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_faces)
extern "C" __global__ void es_faces(real* vc, real* vc2,
                                    const real* __restrict__ vd,
                                    const unsigned char* __restrict__ cc,
                                    const real* __restrict__ classes, int nx, int ny, int nz,
                                    int kfirst, int kend, int kbase, int oe,
                                    const u64* __restrict__ ctl, long long after) {
    if (after >= 0 ? ((volatile const u64*)ctl)[0] != (u64)after + 1
                   : ((volatile const u64*)ctl)[1] != 0)
        return;
    // The x and y faces' second index is the plane: the grid covers planes kfirst.. only.
    const int f = blockIdx.z, b = blockIdx.y * blockDim.y + threadIdx.y;
    face_node(vc, vc2, vd, cc, classes, nx, ny, nz, kfirst, kend, kbase, oe, f,
              blockIdx.x * blockDim.x + threadIdx.x, (f >> 1) < 2 ? kfirst + b : b);
}
#endif

// The book-keeping of iteration k on one slab of a decomposed run: every slab's sums
// added in slab order and, within a slab, in the order of its sweeps (so every slab
// decides alike), each slab's `per_step` values of iteration k read from sources[s] +
// (k mod ring)·per_step, laid out (res², V²) per sweep; then as sweep_record against
// `tol`, which the host gives as −1 where the run does not test (between multiples of the
// problem's check interval, as on one device and on the CPU). `measured` = 0: the slabs
// skipped this iteration's sums (the table form between its tests), so it records
// ES_NOT_MEASURED and the count only.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_record)
extern "C" __global__ void es_record(const u64* __restrict__ sources, int count, int per_step,
                                     unsigned ring, u64 k, double tol, u64* __restrict__ ctl,
                                     double* __restrict__ hist, unsigned hist_len,
                                     int measured) {
    // ctl[1] is read by every thread before thread 0 may write it (after the barriers).
    if (blockIdx.x != 0 || ctl[1] != 0) return;
    if (!measured) {
        if (threadIdx.x == 0) record_iteration(ES_NOT_MEASURED, 0, k, ctl, hist, hist_len);
        return;
    }
    double res2 = 0.0, v2 = 0.0;
    add_slab_sums(sources, count, per_step, ring, k, [&](int c, double v) {
        if (c & 1)
            v2 += v;
        else
            res2 += v;
    });
    if (threadIdx.x != 0) return;
    double rel;
    const int verdict = residual_verdict(res2, v2, tol, rel);
    record_iteration(rel, verdict, k, ctl, hist, hist_len);
}
#endif

// ---------------------------------------------------------------------------------------
// es_persist: many red-black iterations in one cooperative launch, for meshes small
// enough that launches, not bytes, set the pace (the 128³ Poisson case: 36 MB, in L2).
//
// The grid is what the device holds at once (cudaLaunchCooperativeKernel guarantees it
// is co-resident); each block takes the per-colour sweep's tiles t = blockIdx.x,
// blockIdx.x + gridDim.x, ... of a colour (and, with free face nodes, a share of that
// colour's face nodes: faces and sweep of a colour commute), then every block waits at
// a grid barrier before the other colour. Each block's (res², V²) per colour go to
// `partials` (two iterations' worth, by parity, so a block running ahead never
// overwrites sums a slower block still reads); after black every block adds all of them
// in block order — the same total in every block — so all decide alike, with no third
// barrier, whether the solve stops. Iteration `first` .. `last` - 1; block 0 writes the
// history slot and ctl as sweep_record does.
// ---------------------------------------------------------------------------------------

// Every block of the grid arrives before any leaves; bar[0] counts arrivals, bar[1]
// counts barriers passed. The fences make each block's writes before the barrier
// visible to every block after it (ordinary loads: V is never read through the
// read-only path in es_persist).
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        volatile unsigned* vb = bar;
        const unsigned gen = vb[1];
        __threadfence();
        if (atomicAdd(&bar[0], 1u) == gridDim.x - 1) {
            atomicExch(&bar[0], 0u);
            __threadfence();
            atomicAdd(&bar[1], 1u);
        } else {
            while (vb[1] == gen) __nanosleep(20);
        }
        __threadfence();
    }
    __syncthreads();
}

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_persist)
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_persist(real* v0, real* v1, const unsigned char* __restrict__ c0,
           const unsigned char* __restrict__ c1, const real* __restrict__ classes,
           const real* __restrict__ q0, const real* __restrict__ q1, int has_qnode, real q,
           const real* __restrict__ rxp, const real* __restrict__ rxm,
           const real* __restrict__ ryp, const real* __restrict__ rym,
           const real* __restrict__ rzp, const real* __restrict__ rzm, int nx, int ny, int nz,
           int ph, int planes, int tiles_x, int tiles_y, int tiles_z, int has_faces,
           real omega, double tol, u64 first, u64 last, double* __restrict__ partials,
           unsigned* bar, u64* __restrict__ ctl, double* __restrict__ hist,
           unsigned hist_len, unsigned every) {
    if (((volatile u64*)ctl)[1] != 0) return;
    __shared__ es_class cls[ES_TABLE];
    __shared__ es_z zt[(1 + ES_SUM_RANGE) * ES_ZCAP];
    __shared__ int stop;
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    const unsigned nthreads = ES_BX * ES_BY, nb = gridDim.x;
    load_classes(cls, classes, tid, ES_TABLE);
    __syncthreads();
    const unsigned tiles = (unsigned)tiles_x * tiles_y * tiles_z;
    for (u64 it = first; it < last; ++it) {
        double* part = partials + (it & 1) * 4 * nb;
        const auto sweep = [&](auto colour, int oe) {
            real* vc = oe ? v1 : v0;
            const real* vd = oe ? v0 : v1;
            const unsigned char* cc = oe ? c1 : c0;
            const unsigned char* cd = oe ? c0 : c1;
            if (has_faces)
                copy_faces(vc, vd, cc, cls, nx, ny, nz, 0, nz, 0, oe, blockIdx.x * nthreads + tid,
                           nb * nthreads, true);
            double res2 = 0.0, v2 = 0.0;
            for (unsigned t = blockIdx.x; t < tiles; t += nb)
                sweep_tile<decltype(colour)::value>(
                    vc, vd, cc, cd, cls, zt, oe ? q1 : q0, has_qnode, q, rxp, rxm, ryp, rym, rzp,
                    rzm, nx, ny, 1, nz - 1, 0, planes, oe, omega, t % tiles_x,
                    (t / tiles_x) % tiles_y, t / (tiles_x * tiles_y), 1, nz - 1, res2, v2);
            const double r = block_sum(res2);
            __syncthreads();
            const double n = block_sum(v2);
            if (tid == 0) {
                part[(2 * oe) * nb + blockIdx.x] = r;
                part[(2 * oe + 1) * nb + blockIdx.x] = n;
            }
            grid_barrier(bar);
        };
        if (ES_COLOUR_T) {
            sweep(Colour<0>{}, 0);
            sweep(Colour<1>{}, 1);
        } else {
            for (int oe = 0; oe < 2; ++oe) sweep(Colour<-1>{}, oe);
        }
        // (res², V²) of red, then of black, each added over the blocks in block order.
        double total[4];
        for (int v = 0; v < 4; ++v) {
            double s = 0.0;
            for (unsigned i = tid; i < nb; i += nthreads) s += __ldcg(&part[v * nb + i]);
            total[v] = block_sum(s);
            __syncthreads();
        }
        if (tid == 0) {
            double rel;
            // Convergence tested every `every` iterations (the problem's check interval).
            const double t = (it + 1) % every == 0 ? tol : -1.0;
            const int verdict =
                residual_verdict(total[0] + total[2], total[1] + total[3], t, rel);
            if (blockIdx.x == 0) record_iteration(rel, verdict, it, ctl, hist, hist_len);
            stop = verdict;
        }
        __syncthreads();
        if (stop) return;
    }
}
#endif

// ---------------------------------------------------------------------------------------
// es_fused: one launch per red-black iteration, both colours in one pass through memory.
//
// Ping-pong buffers: every value is read from the input buffer (ri, bi: red and black
// arrays of the colour-split layout) and written to the output buffer (ro, bo), so no
// block reads what another block has written in this launch, whatever their progress.
// Per node and iteration: V read once and written once, the class byte read once
// (2T + 1 B; + T for a per-node charge), against 3T + 2 for the per-colour sweeps.
//
// Thread (tx, ty) holds pair h (nodes 2h, 2h + 1: one red, one black, both at compact
// index h) of row j and marches up z. At step k it computes red at plane k + 1 and then
// black at plane k; both sit at i = 2h + O, O = (j + k + 1) & 1 (warp-uniform; two planes
// per trip make it a compile-time constant). Black at plane k needs the new red values at
// planes k - 1, k, k + 1: its own column's are in registers, the row neighbours' in the
// shared plane where every warp stores its new red values, the x-neighbours' come from
// the adjacent lanes. So the block's edges are a halo that computes red only: lanes 0
// and 31 of each warp and the thread rows 0 and ES_BY - 1; a warp owns the 30 pairs of
// lanes 1..30, a block the ES_BY - 2 rows between. A halo thread computes what the owner
// computes, operation for operation (the same bits), from the input buffer. Three shared
// planes rotate, so one __syncthreads per step keeps readers and writers apart. A chunk
// of planes [k0, k1) also computes red at plane k0 - 1 (its own columns). Red values at
// faces and held nodes are the input buffer's: the red faces launch writes them to both
// buffers first.
// ---------------------------------------------------------------------------------------

struct Val { real v, e; };

struct Fused {
    const real* ri; const real* bi;
    real* ro; real* bo;
    const unsigned char* cr; const unsigned char* cb;
    const real* qr; const real* qb;
    const es_class* cls;
    const real *rxp, *rxm, *ryp, *rym, *rzp, *rzm;
    int has_qnode; real q, omega;
    int nx, ny, nz, ph;
    unsigned hj, hk;
};

// The SOR update of one node from its six neighbours (values and epsr), in the CPU
// engine's order of operations.
__device__ __forceinline__ real sor_update(real e, real old, real q, real omega, real vxp,
                                           real exp, real vxm, real exm, real vyp, real eyp,
                                           real vym, real eym, real vzp, real ezp, real vzm,
                                           real ezm, real cxp, real cxm, real cyp, real cym,
                                           real czp, real czm, real& res) {
    const real axp = (e + exp) * cxp;
    const real axm = (e + exm) * cxm;
    const real ayp = (e + eyp) * cyp;
    const real aym = (e + eym) * cym;
    const real azp = (e + ezp) * czp;
    const real azm = (e + ezm) * czm;
    const real sum = axp * vxp + axm * vxm + ayp * vyp + aym * vym + azp * vzp + azm * vzm;
    const real den = axp + axm + ayp + aym + azp + azm;
    res = sor_residual(sum + q, den, old, omega);
    return old + res;
}

struct Point { real v, e, res; bool updated; };

// The new red value of pair h of row j at plane k, from the input buffer alone (loads
// clamped into the arrays; a node that is not an interior free node keeps its value).
// For the chunk's first planes only: the march streams everything else.
__device__ Point red_new(const Fused& w, int h, int j, int k) {
    const int hc = min(max(h, 0), w.ph - 1), jc = min(max(j, 0), w.ny - 1),
              kc = min(max(k, 0), w.nz - 1);
    const int o = (j + k) & 1, i = 2 * h + o;
    const unsigned m = ((unsigned)kc * w.ny + jc) * w.ph + hc;
    Point p;
    p.v = w.ri[m];
    const es_class me = w.cls[w.cr[m]];
    p.e = me.eps;
    p.res = 0;
    p.updated = i >= 1 && i <= w.nx - 2 && j >= 1 && j <= w.ny - 2 && k >= 1 &&
                k <= w.nz - 2 && me.held == (real)0;
    if (!p.updated) return p;
    // The pair's black node is at i + 1 (o = 0) or i - 1; the other x-neighbour is in the
    // pair beside it.
    const unsigned xp = o ? m + 1 : m, xm = o ? m : m - 1;
    const real* vd = w.bi;
    const unsigned char* cd = w.cb;
    const real q = w.has_qnode ? w.qr[m] : w.q;
    p.v = sor_update(me.eps, p.v, q, w.omega, vd[xp], w.cls[cd[xp]].eps, vd[xm],
                     w.cls[cd[xm]].eps, vd[m + w.hj], w.cls[cd[m + w.hj]].eps, vd[m - w.hj],
                     w.cls[cd[m - w.hj]].eps, vd[m + w.hk], w.cls[cd[m + w.hk]].eps,
                     vd[m - w.hk], w.cls[cd[m - w.hk]].eps, w.rxp[i], w.rxm[i], w.ryp[j],
                     w.rym[j], w.rzp[k], w.rzm[k], p.res);
    return p;
}

// What one thread carries up its column at step k (planes named relative to k). Values
// loaded during step k - 1 arrive as raw values and class codes; their class lookups
// happen where step k uses them, so a load's latency hides behind a whole step.
struct Col {
    real b0, b1, b2;      // black, input buffer, planes k, k+1, k+2
    es_class k0, k1;      // classes of b0, b1
    int cb2;              // class code of b2
    real r1; int cr1;     // red, input, plane k+1, and its class code
    real ys, yn;          // black, input, plane k+1, rows j-1 and j+1
    int cys, cyn;
    real xe; int cxe;     // lanes 0 and 31: the far x-neighbour of red k+1 (black k+1)
    real qr1, qb0;        // charge terms of red k+1 and black k
    real rm, erm, rc, erc;// red, new, planes k-1 and k
    real czp0, czm0, czp1, czm1;  // z coefficients of planes k and k+1
    unsigned n;           // index of (h, j, k)
    double res2, v2;
};

struct Tile {
    int tx, ty, k1;
    bool in0, in1, owned, edge_left, edge_right;
    real xp0, xm0, xp1, xm1, yp, ym;
};

typedef Val RedPlanes[3][ES_BY][ES_BX];

template <int O>
__device__ __forceinline__ void fused_step(const Fused& w, const Tile& t, RedPlanes& s,
                                           Col& c, int k, int& bk, int& bk1) {
    const unsigned n = c.n, n1 = n + w.hk, n2 = n1 + w.hk, n3 = n2 + w.hk;
    // Loads for step k + 1 (offset 1 - O), consumed there.
    const real b3 = w.bi[n3];
    const int cb3 = w.cb[n3];
    const real r2 = w.ri[n2];
    const int cr2 = w.cr[n2];
    const real ys2 = w.bi[n2 - w.hj], yn2 = w.bi[n2 + w.hj];
    const int cys2 = w.cb[n2 - w.hj], cyn2 = w.cb[n2 + w.hj];
    const real qr2 = w.has_qnode ? w.qr[n2] : w.q;
    const real qb1 = w.has_qnode ? w.qb[n1] : w.q;
    const real czp2 = w.rzp[min(k + 2, w.nz - 1)], czm2 = w.rzm[min(k + 2, w.nz - 1)];
    real xe2 = 0;
    int cxe2 = 0;
    if (O ? t.edge_left : t.edge_right) {
        const unsigned x = O ? n2 - 1 : n2 + 1;
        xe2 = w.bi[x]; cxe2 = w.cb[x];
    }

    const bool in = O ? t.in1 : t.in0;
    const real cxp = O ? t.xp1 : t.xp0, cxm = O ? t.xm1 : t.xm0;
    const es_class k2 = w.cls[c.cb2], c1 = w.cls[c.cr1];

    // Red at plane k + 1, node i = 2h + O. Its pair's black (plane k + 1) is at i + 1 for
    // O = 0, i - 1 for O = 1; the other x-neighbour is the adjacent pair's.
    real xo, exo;
    if (O == 0) {
        xo = __shfl_up_sync(0xffffffffu, c.b1, 1);
        exo = __shfl_up_sync(0xffffffffu, c.k1.eps, 1);
    } else {
        xo = __shfl_down_sync(0xffffffffu, c.b1, 1);
        exo = __shfl_down_sync(0xffffffffu, c.k1.eps, 1);
    }
    if (O == 0 ? t.edge_left : t.edge_right) { xo = c.xe; exo = w.cls[c.cxe].eps; }
    real rn = c.r1;
    if (in && k + 1 <= w.nz - 2 && c1.held == (real)0) {
        real res;
        rn = sor_update(c1.eps, c.r1, c.qr1, w.omega, O ? xo : c.b1, O ? exo : c.k1.eps,
                        O ? c.b1 : xo, O ? c.k1.eps : exo, c.yn, w.cls[c.cyn].eps, c.ys,
                        w.cls[c.cys].eps, c.b2, k2.eps, c.b0, c.k0.eps, cxp, cxm, t.yp, t.ym,
                        c.czp1, c.czm1, res);
        if (t.owned && k + 1 < t.k1) {
            w.ro[n1] = rn;
            c.res2 += (double)res * (double)res;
            c.v2 += (double)rn * (double)rn;
        }
    }
    const int bk2 = 3 - bk - bk1;  // the third buffer, free since step k - 1's barrier
    s[bk2][t.ty][t.tx] = Val{rn, c1.eps};
    __syncthreads();

    // Black at plane k, the same i. Its pair's red (plane k) is at i + 1 for O = 0, i - 1
    // for O = 1; the other x-neighbour is the adjacent lane's (halo lanes own no black).
    if (O == 0) {
        xo = __shfl_up_sync(0xffffffffu, c.rc, 1);
        exo = __shfl_up_sync(0xffffffffu, c.erc, 1);
    } else {
        xo = __shfl_down_sync(0xffffffffu, c.rc, 1);
        exo = __shfl_down_sync(0xffffffffu, c.erc, 1);
    }
    if (t.owned && in && c.k0.held == (real)0) {
        const Val s_ = s[bk][t.ty - 1][t.tx], n_ = s[bk][t.ty + 1][t.tx];
        real res;
        const real bn = sor_update(c.k0.eps, c.b0, c.qb0, w.omega, O ? xo : c.rc,
                                   O ? exo : c.erc, O ? c.rc : xo, O ? c.erc : exo, n_.v, n_.e,
                                   s_.v, s_.e, rn, c1.eps, c.rm, c.erm, cxp, cxm, t.yp, t.ym,
                                   c.czp0, c.czm0, res);
        w.bo[n] = bn;
        c.res2 += (double)res * (double)res;
        c.v2 += (double)bn * (double)bn;
    }

    // Shift up a plane.
    c.rm = c.rc; c.erm = c.erc;
    c.rc = rn; c.erc = c1.eps;
    c.b0 = c.b1; c.k0 = c.k1;
    c.b1 = c.b2; c.k1 = k2;
    c.b2 = b3; c.cb2 = cb3;
    c.r1 = r2; c.cr1 = cr2;
    c.ys = ys2; c.cys = cys2;
    c.yn = yn2; c.cyn = cyn2;
    c.xe = xe2; c.cxe = cxe2;
    c.qr1 = qr2; c.qb0 = qb1;
    c.czp0 = c.czp1; c.czm0 = c.czm1;
    c.czp1 = czp2; c.czm1 = czm2;
    c.n = n1;
    bk1 = bk;
    bk = bk2;
}

// ES_FUSED_UNROLL = 4 planes per trip lets the black stream rotate through four registers
// (three planes and the one loading) with no register move; 2 keeps the code smaller.
#ifndef ES_FUSED_UNROLL
#define ES_FUSED_UNROLL 2
#endif
template <int O0>
__device__ __forceinline__ void fused_march(const Fused& w, const Tile& t, RedPlanes& s,
                                            Col& c, int k0, int k1, int& bk, int& bk1) {
    int k = k0;
    for (; ES_FUSED_UNROLL == 4 && k + 3 < k1; k += 4) {
        fused_step<O0>(w, t, s, c, k, bk, bk1);
        fused_step<1 - O0>(w, t, s, c, k + 1, bk, bk1);
        fused_step<O0>(w, t, s, c, k + 2, bk, bk1);
        fused_step<1 - O0>(w, t, s, c, k + 3, bk, bk1);
    }
    for (; k + 1 < k1; k += 2) {
        fused_step<O0>(w, t, s, c, k, bk, bk1);
        fused_step<1 - O0>(w, t, s, c, k + 1, bk, bk1);
    }
    if (k < k1) fused_step<O0>(w, t, s, c, k, bk, bk1);
}

// One red-black iteration: ri, bi in, ro, bo out; the stop logic of es_sweep (colour 1).
// Block: ES_BX (a multiple of 32) by ES_BY >= 3 threads; it owns 30 pairs per warp and
// ES_BY - 2 rows.
#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_fused)
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_fused(const real* __restrict__ ri, const real* __restrict__ bi, real* __restrict__ ro,
         real* __restrict__ bo, const unsigned char* __restrict__ cr,
         const unsigned char* __restrict__ cb, const real* __restrict__ classes,
         const real* __restrict__ qr, const real* __restrict__ qb, int has_qnode, real q,
         const real* __restrict__ rxp, const real* __restrict__ rxm,
         const real* __restrict__ ryp, const real* __restrict__ rym,
         const real* __restrict__ rzp, const real* __restrict__ rzm, int nx, int ny, int nz,
         int ph, int planes, real omega, double tol, u64 iteration,
         double* __restrict__ partials, unsigned int* __restrict__ ticket,
         u64* __restrict__ ctl, double* __restrict__ hist, unsigned hist_len) {
    if (((volatile u64*)ctl)[1] != 0) return;
    __shared__ es_class cls[256];
    __shared__ RedPlanes s;
    Tile t;
    t.tx = threadIdx.x; t.ty = threadIdx.y;
    const int tid = t.tx + ES_BX * t.ty;
    load_classes(cls, classes, tid);
    Fused w;
    w.ri = ri; w.bi = bi; w.ro = ro; w.bo = bo; w.cr = cr; w.cb = cb;
    w.qr = qr; w.qb = qb; w.cls = cls;
    w.rxp = rxp; w.rxm = rxm; w.ryp = ryp; w.rym = rym; w.rzp = rzp; w.rzm = rzm;
    w.has_qnode = has_qnode; w.q = q; w.omega = omega;
    w.nx = nx; w.ny = ny; w.nz = nz; w.ph = ph;
    w.hj = ph; w.hk = (unsigned)ph * ny;

    const int lane = t.tx & 31;
    const int h = blockIdx.x * (30 * (ES_BX / 32)) + 30 * (t.tx >> 5) + lane - 1;
    const int j = blockIdx.y * (ES_BY - 2) + t.ty;
    const int k0 = 1 + blockIdx.z * planes;
    t.k1 = min(k0 + planes, nz - 1);
    t.owned = lane >= 1 && lane <= 30 && t.ty >= 1 && t.ty <= ES_BY - 2;
    const bool active = j >= 1 && j <= ny - 2;
    const int hc = min(max(h, 0), ph - 1), jl = min(j, ny - 1);
    t.edge_left = lane == 0;
    t.edge_right = lane == 31;
    const int i0 = 2 * h, i0c = min(max(i0, 1), nx - 2), i1c = min(max(i0 + 1, 1), nx - 2);
    t.xp0 = rxp[i0c]; t.xm0 = rxm[i0c]; t.xp1 = rxp[i1c]; t.xm1 = rxm[i1c];
    const int jr = min(max(j, 1), ny - 2);
    t.yp = ryp[jr]; t.ym = rym[jr];
    t.in0 = active && i0 >= 1 && i0 <= nx - 2;
    t.in1 = active && i0 + 1 >= 1 && i0 + 1 <= nx - 2;
    __syncthreads();

    Col c;
    c.res2 = 0.0; c.v2 = 0.0;
    if (k0 < t.k1) {
        // The red planes k0 - 1 and k0 of the thread's pair.
        const Point pm = red_new(w, h, j, k0 - 1);
        const Point pc = red_new(w, h, j, k0);
        c.rm = pm.v; c.erm = pm.e;
        c.rc = pc.v; c.erc = pc.e;
        c.n = ((unsigned)k0 * ny + jl) * ph + hc;
        if (pc.updated && t.owned) {
            ro[c.n] = pc.v;
            c.res2 += (double)pc.res * (double)pc.res;
            c.v2 += (double)pc.v * (double)pc.v;
        }
        int bk = 0, bk1 = 2;
        s[bk][t.ty][t.tx] = Val{pc.v, pc.e};
        // The column's stream at step k0.
        const unsigned n = c.n, n1 = n + w.hk, n2 = n1 + w.hk;
        c.b0 = bi[n]; c.k0 = cls[cb[n]];
        c.b1 = bi[n1]; c.k1 = cls[cb[n1]];
        c.b2 = bi[n2]; c.cb2 = cb[n2];
        c.r1 = ri[n1]; c.cr1 = cr[n1];
        c.ys = bi[n1 - w.hj]; c.cys = cb[n1 - w.hj];
        c.yn = bi[n1 + w.hj]; c.cyn = cb[n1 + w.hj];
        c.qr1 = has_qnode ? qr[n1] : q;
        c.qb0 = has_qnode ? qb[n] : q;
        c.czp0 = rzp[k0]; c.czm0 = rzm[k0];
        c.czp1 = rzp[k0 + 1]; c.czm1 = rzm[k0 + 1];
        const int O0 = (j + k0 + 1) & 1;
        c.xe = 0; c.cxe = 0;
        if (O0 ? t.edge_right : t.edge_left) {
            const unsigned xi = O0 ? n1 + 1 : n1 - 1;
            c.xe = bi[xi]; c.cxe = cb[xi];
        }
        // O0 from j, not jl: warp-uniform (a warp is one row).
        if (O0) fused_march<1>(w, t, s, c, k0, t.k1, bk, bk1);
        else fused_march<0>(w, t, s, c, k0, t.k1, bk, bk1);
    }

    double total[2];
    if (!grid_residual_sums(c.res2, c.v2, partials, ticket, total)) return;
    double rel;
    const int verdict = residual_verdict(total[0], total[1], tol, rel);
    record_iteration(rel, verdict, iteration, ctl, hist, hist_len);
}
#endif

// ---------------------------------------------------------------------------------------
// es_staged: es_sweep with every operand of a plane staged through shared memory by
// asynchronous copies (cp.async), ES_STAGE planes ahead of the plane updated, so the
// loads' latency hides behind several planes of work without holding registers. Each
// warp walks one row j (32 compact columns from h0) up z and keeps a ring of ES_STAGE + 3
// planes: per plane the other colour's rows j - 1, j, j + 1 (compact columns h0 - 4 ..
// h0 + 35, so x-neighbours at the warp's edges are there too) with their class bytes,
// and its own colour's row j, class bytes and charge. Only the warp reads its ring, so a
// __syncwarp (after cp.async.wait_group) is all the synchronisation. The update is
// es_sweep's, operation for operation (sor_update): the same bits.
// ---------------------------------------------------------------------------------------

#if defined(ES_STAGED) && ES_STAGED  // 1 only when this kernel is used (its rings need the room)
#ifndef ES_STAGE
#define ES_STAGE 3
#endif
#define ES_RING (ES_STAGE + 3)

struct StagedPlane {
    real vd[3][40];
    real vc[32];
    real q[32];
    unsigned char cd[3][40];
    unsigned char cc[32];
};

__device__ __forceinline__ void cp_async_bytes4(void* smem, const void* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
}

__device__ __forceinline__ void cp_async_real(real* smem, const real* gmem) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if (sizeof(real) == 4)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

struct Staging {
    const real* vc; const real* vd; const real* qc;
    const unsigned char* cc; const unsigned char* cd;
    int has_qnode, ph;
    long long len;  // values per colour array
};

// Queue the copies of plane p's operands for the warp's row (base: index of (h0, j, p)).
__device__ __forceinline__ void stage_plane(StagedPlane& sp, const Staging& g, long long base,
                                            int lane) {
#pragma unroll
    for (int it = 0; it < 4; ++it) {
        const int e = lane + 32 * it;
        if (e < 120) {
            const int r = e >= 80 ? 2 : e >= 40 ? 1 : 0, c = e - 40 * r;
            const long long at = base + (long long)(r - 1) * g.ph + c - 4;
            if (at >= 0 && at < g.len) cp_async_real(&sp.vd[r][c], g.vd + at);
        }
    }
    cp_async_real(&sp.vc[lane], g.vc + base + lane);
    if (g.has_qnode) cp_async_real(&sp.q[lane], g.qc + base + lane);
    if (lane < 30) {
        const int r = lane / 10, c = 4 * (lane - 10 * r);
        const long long at = base + (long long)(r - 1) * g.ph + c - 4;
        if (at >= 0 && at + 4 <= g.len) cp_async_bytes4(&sp.cd[r][c], g.cd + at);
    }
    if (lane < 8) cp_async_bytes4(&sp.cc[4 * lane], g.cc + base + 4 * lane);
}

struct StagedRow {
    const es_class* cls;
    real* vc;
    real q, omega;
    const real* rzp; const real* rzm;
    real xp0, xm0, xp1, xm1, yp, ym;
    bool in0, in1;
    int has_qnode;
};

// The update of the node of compact column h0 + lane at plane k (offset O) from the
// planes k - 1, k, k + 1 staged in m, c, n; n_at: its index in the colour array.
template <int O>
__device__ __forceinline__ void staged_update(const StagedRow& w, const StagedPlane& m,
                                              const StagedPlane& c, const StagedPlane& n,
                                              int lane, int k, unsigned n_at, double& res2,
                                              double& v2) {
    if (!(O ? w.in1 : w.in0)) return;
    const es_class me = w.cls[c.cc[lane]];
    if (me.held != (real)0) return;
    const int x = lane + 4;
    const real dc = c.vd[1][x], xo = O ? c.vd[1][x + 1] : c.vd[1][x - 1];
    const real ec = w.cls[c.cd[1][x]].eps;
    const real exo = w.cls[O ? c.cd[1][x + 1] : c.cd[1][x - 1]].eps;
    const real q = w.has_qnode ? c.q[lane] : w.q;
    real res;
    const real nv = sor_update(
        me.eps, c.vc[lane], q, w.omega, O ? xo : dc, O ? exo : ec, O ? dc : xo, O ? ec : exo,
        c.vd[2][x], w.cls[c.cd[2][x]].eps, c.vd[0][x], w.cls[c.cd[0][x]].eps, n.vd[1][x],
        w.cls[n.cd[1][x]].eps, m.vd[1][x], w.cls[m.cd[1][x]].eps, O ? w.xp1 : w.xp0,
        O ? w.xm1 : w.xm0, w.yp, w.ym, w.rzp[k], w.rzm[k], res);
    w.vc[n_at] = nv;
    res2 += (double)res * (double)res;
    v2 += (double)nv * (double)nv;
}

#if !defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_staged)
extern "C" __global__ void __launch_bounds__(ES_BX * ES_BY, ES_MINB)
es_staged(ES_SWEEP_PARAMS) {
    if (((volatile u64*)ctl)[1] != 0) return;
    __shared__ es_class cls[256];
    __shared__ StagedPlane ring[(ES_BX / 32) * ES_BY][ES_RING];
    const int tid = threadIdx.x + ES_BX * threadIdx.y;
    load_classes(cls, classes, tid);
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = tid >> 5;
    const int h0 = blockIdx.x * ES_BX + (threadIdx.x & ~31), h = h0 + lane;
    const int j = 1 + blockIdx.y * ES_BY + threadIdx.y;
    const int k0 = 1 + blockIdx.z * planes;
    const int k1 = min(k0 + planes, nz - 1);
    const bool row = j < ny - 1;
    const int jr = row ? j : 1;
    StagedRow w;
    w.cls = cls; w.vc = vc; w.q = q; w.omega = omega; w.rzp = rzp; w.rzm = rzm;
    w.has_qnode = has_qnode;
    const int i0 = 2 * h, i0c = min(max(i0, 1), nx - 2), i1c = min(i0 + 1, nx - 2);
    w.xp0 = rxp[i0c]; w.xm0 = rxm[i0c]; w.xp1 = rxp[i1c]; w.xm1 = rxm[i1c];
    w.yp = ryp[jr]; w.ym = rym[jr];
    w.in0 = row && i0 >= 1 && i0 <= nx - 2;
    w.in1 = row && i0 + 1 <= nx - 2;
    Staging g;
    g.vc = vc; g.vd = vd; g.qc = qc; g.cc = cc; g.cd = cd; g.has_qnode = has_qnode; g.ph = ph;
    g.len = (long long)(nz + 2) * ny * ph;
    const long long hk = (long long)ny * ph;
    const long long row0 = (long long)jr * ph + h0;  // (h0, jr) of plane 0

    double res2 = 0.0, v2 = 0.0;
    if (k0 < k1) {
        StagedPlane* rw = ring[warp];
        // Plane p lives in slot (p - k0 + 1) % ES_RING. First planes k0 - 1 .. k0 +
        // ES_RING - 3 (none past k1: the last update reads k1).
#pragma unroll
        for (int i = 0; i < ES_RING - 1; ++i) {
            stage_plane(rw[i], g, row0 + min(k0 - 1 + i, k1) * hk, lane);
            cp_async_commit();
        }
        // Slots of planes k - 2 (free), k - 1, k, k + 1.
        int sf = ES_RING - 1, sm = 0, sc = 1, sn = 2;
        const bool odd = (oe + j + k0) & 1;  // from j: warp-uniform
        for (int k = k0; k < k1; ++k) {
            // Plane k + ES_RING - 2 into the slot plane k - 2 left (read at step k - 1,
            // before its closing __syncwarp).
            stage_plane(rw[sf], g, row0 + min(k + ES_RING - 2, k1) * hk, lane);
            cp_async_commit();
            // Planes up to k + 1 landed: at most ES_RING - 3 younger groups pending.
            cp_async_wait<ES_RING - 3>();
            __syncwarp();
            const unsigned at = (unsigned)(row0 + k * hk) + lane;
            if (odd == ((k - k0) & 1)) staged_update<0>(w, rw[sm], rw[sc], rw[sn], lane, k, at, res2, v2);
            else staged_update<1>(w, rw[sm], rw[sc], rw[sn], lane, k, at, res2, v2);
            __syncwarp();
            sf = sm; sm = sc; sc = sn; sn = sn + 1 == ES_RING ? 0 : sn + 1;
        }
        cp_async_wait<0>();
    }
    sweep_record(res2, v2, partials, ticket, ctl, acc, hist, hist_len, oe, tol, iteration,
                 slot);
}
#endif
#endif  // ES_STAGED

// ---------------------------------------------------------------------------------------
// es_blocked: ES_TB_T half-steps (red, black, red, ...) per pass from a stencil table
// (stencil_table.rs: a 16-bit id per node indexing 8 weights, V' = O·V + B + Σ A_f·V_f in
// that order, by fma), u -> un, in the natural layout (x fastest, rows of `px` values, px
// even; values outside the mesh read as 0). After heat_tb3_pass (heat/kernels.cu): a block
// of 32 × ES_TB_W threads covers 64 columns by ES_TB_W·ES_TB_R rows, a halo of ES_TB_T
// included, and marches z as a wavefront, level l computing plane p − l; each thread
// holds 2 x values of ES_TB_R rows for every level in registers, x neighbours by shuffle,
// y neighbours across warps from shared memory (one barrier per plane). The colour a
// level updates in row r of plane p − l is element (1 + r + p) & 1 of the pair at every
// level, so taking planes in pairs makes it a constant. Tile-edge values go wrong a node
// per level, which the halo absorbs. With ES_TB_SUMS (the passes that end where the run
// tests convergence, or at its last iteration), the (res², V²) of the pass's last
// iteration over its free interior output nodes (ids from ES_TB_FIRST_FREE) go to the
// grid's sums and the last block records them: ctl[0] = iterations done, ctl[1] = stop
// flag (tol is -1 where the run does not test), ctl[2] = the buffer holding the state
// (out_buf), the other iterations ES_NOT_MEASURED in the history. Without (the passes
// between tests: 6 % faster in f32, 18 % in f64 at 512³), block 0 records the count and
// the buffer only. 29 instructions per update at 512³ f32 (docs/PERFORMANCE.md). On a
// slab (cuda_blocked.rs) the buffers hold the grid planes zlo..zhi from plane kbase
// (others read as 0), a launch outputs the planes zfirst..zend, and its last iteration's
// sums go to `slot` for es_record, which decides.
#if defined(ES_TB_T) && (!defined(KEISAN_ONLY) || defined(KEISAN_WANT_es_blocked))
#ifndef ES_TB_R
#define ES_TB_R 4
#endif
#ifndef ES_TB_W
#define ES_TB_W 12
#endif
#define ES_TB_FIRST_FREE 7
#ifndef ES_TB_SUMS
#define ES_TB_SUMS 1
#endif
// ES_TB_Q = 1: a charge term per node in bq (the ids' layout) instead of the table's B.
#ifndef ES_TB_Q
#define ES_TB_Q 0
#endif
struct __align__(4 * sizeof(real)) es_real4 { real x, y, z, w; };
struct __align__(2 * sizeof(real)) es_pair { real v[2]; };

template <bool B> struct es_flag { static constexpr bool value = B; };

__device__ __forceinline__ real es_table_update(const es_real4 a, const es_real4 b, real bn,
                                                real c, real xm, real xp, real ym, real yp,
                                                real zm, real zp) {
    real s = fma(b.w, c, bn);
    s = fma(a.x, xm, s);
    s = fma(a.y, xp, s);
    s = fma(a.z, ym, s);
    s = fma(a.w, yp, s);
    s = fma(b.x, zm, s);
    return fma(b.y, zp, s);
}

extern "C" __global__ void __launch_bounds__(32 * ES_TB_W, 1)
    es_blocked(const real* __restrict__ u, real* __restrict__ un,
               const unsigned short* __restrict__ ids, const es_real4* __restrict__ table,
               const real* __restrict__ bq, int ntable, int nz, int ny, int px, int chunk,
               int kbase, int zlo, int zhi, int zfirst, int zend, double tol, u64 iteration,
               double* __restrict__ partials, unsigned int* __restrict__ ticket,
               u64* __restrict__ ctl, double* __restrict__ hist, unsigned hist_len,
               int out_buf, double* __restrict__ slot, int slot_step) {
    constexpr int T = ES_TB_T, R = ES_TB_R, W = ES_TB_W, V = 2, IT = T / 2;
    static_assert(T % 2 == 0 && R % 2 == 0, "even levels and rows");
    constexpr int HX = (T + V - 1) / V * V;
    constexpr int TXO = 32 * V - 2 * HX, TYO = W * R - 2 * T;
    static_assert(TXO > 0 && TYO > 0, "the halo covers the whole tile");
    extern __shared__ es_pair es_tb_smem[];  // [buffer][level][warp][first, last row][lane]
    constexpr int LS = W * 2 * 32;
    es_pair* const sm = es_tb_smem;
    es_real4* const tab = (es_real4*)(sm + 2 * T * LS);
    if (((volatile u64*)ctl)[1] != 0) return;
    const int lane = threadIdx.x, w = threadIdx.y, tid = w * 32 + lane;
    for (int i = tid; i < 2 * ntable; i += 32 * W) tab[i] = table[i];
    for (int i = tid; i < 2 * T * LS; i += 32 * W) sm[i].v[0] = sm[i].v[1] = (real)0;
    __syncthreads();
    // A thread's sums in `real` (a few hundred terms per pass; f64 ones took a quarter
    // of an f32 pass), then in f64 across the block and the grid.
    real res2 = (real)0, v2 = (real)0;
    const int tile_x0 = (int)blockIdx.x * TXO - HX, tile_y0 = (int)blockIdx.y * TYO - T;
    const int gx = tile_x0 + lane * V, gy = tile_y0 + w * R;
    const long ms = (long)ny * px;
    const int c0 = zfirst + blockIdx.z * chunk, c1 = min(c0 + chunk, zend);
    const bool x_in = gx >= 0 && gx < px;
    const bool lane_out = lane >= HX / V && lane < 32 - HX / V;
    unsigned row_in = 0, row_out = 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int y = gy + r, ty = w * R + r;
        if (x_in && y >= 0 && y < ny) row_in |= 1u << r;
        if (x_in && y >= 0 && y < ny && lane_out && ty >= T && ty < W * R - T)
            row_out |= 1u << r;
    }
    const long col = x_in ? (long)max(gy, 0) * px + gx : 0;
    auto row_at = [&](int r) { return (long)(gy + r - max(gy, 0)) * px; };
    es_pair below[T][R], centre[T][R], ahead[R];
    // A lane's two ids of a row, 16 bits each.
    unsigned idq[T][R], idahead[R];
#pragma unroll
    for (int l = 0; l < T; ++l)
#pragma unroll
        for (int r = 0; r < R; ++r) {
            idq[l][r] = 0;
            below[l][r].v[0] = below[l][r].v[1] = centre[l][r].v[0] = centre[l][r].v[1] = (real)0;
        }
    // Even, so that the rounds' plane parity is a constant (planes below zlo read as 0).
    const int p0 = max(c0 - T, 0) & ~1;
    auto load = [&](int p) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if ((row_in >> r & 1) && p >= zlo && p < zhi) {
                ahead[r] = *(const es_pair*)(u + (p - kbase) * ms + col + row_at(r));
                idahead[r] = *(const unsigned*)(ids + (p - kbase) * ms + col + row_at(r));
            } else {
                ahead[r].v[0] = ahead[r].v[1] = (real)0;
                idahead[r] = 0;
            }
        }
    };
    load(p0);
    const int up_at = max(w - 1, 0) * 64 + 32 + lane, down_at = min(w + 1, W - 1) * 64 + lane;
    const int first_at = w * 64 + lane, last_at = w * 64 + 32 + lane;

    auto round = [&](auto odd, int p, int k) {
        constexpr int PP = decltype(odd)::value ? 1 : 0;
        const es_pair* const rd = sm + ((k & 1) ^ 1) * T * LS;
        es_pair* const wr = sm + (k & 1) * T * LS;
        es_pair v[R];
        unsigned idcur[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            v[r] = ahead[r];
            idcur[r] = idahead[r];
        }
        load(p + 1);
        wr[first_at] = v[0];
        wr[last_at] = v[R - 1];
#pragma unroll
        for (int l = 1; l <= T; ++l) {
            const es_pair up = rd[(l - 1) * LS + up_at];
            const es_pair down = rd[(l - 1) * LS + down_at];
            const int q = p - l;
            const bool counted = q >= c0 && q < c1;
            es_pair res[R];
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const es_pair& c = centre[l - 1][r];
                res[r] = c;
                // The node of colour (l − 1) & 1 in row r of plane p − l.
                const int e = (1 + r + PP) & 1;
                const real side = e == 0 ? __shfl_up_sync(0xffffffffu, c.v[1], 1)
                                         : __shfl_down_sync(0xffffffffu, c.v[0], 1);
                const int id = (idq[l - 1][r] >> (16 * e)) & 0xffff;
                const es_real4 a = tab[2 * id], b = tab[2 * id + 1];
                const real xm = e ? c.v[0] : side, xp = e ? side : c.v[1];
                const real ym = r > 0 ? centre[l - 1][r - 1].v[e] : up.v[e];
                const real yp = r < R - 1 ? centre[l - 1][r + 1].v[e] : down.v[e];
                real bn = b.z;
                if (ES_TB_Q) {
                    // The node's own charge term (0 outside the mesh, as its value).
                    bn = (row_in >> r & 1) && q >= zlo && q < zhi
                             ? bq[(q - kbase) * ms + col + row_at(r) + e]
                             : (real)0;
                }
                res[r].v[e] = es_table_update(a, b, bn, c.v[e], xm, xp, ym, yp,
                                              below[l - 1][r].v[e], v[r].v[e]);
                // The pass's last iteration: its last two levels.
                if (ES_TB_SUMS && l > T - 2 && counted && (row_out >> r & 1) &&
                    id >= ES_TB_FIRST_FREE) {
                    const real d = res[r].v[e] - c.v[e], nv = res[r].v[e];
                    res2 = fma(d, d, res2);
                    v2 = fma(nv, nv, v2);
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) {
                below[l - 1][r] = centre[l - 1][r];
                centre[l - 1][r] = v[r];
                v[r] = res[r];
            }
            if (l < T) {
                wr[l * LS + first_at] = v[0];
                wr[l * LS + last_at] = v[R - 1];
            }
        }
        const int q = p - T;
        if (q >= c0 && q < c1) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (row_out >> r & 1) *(es_pair*)(un + (q - kbase) * ms + col + row_at(r)) = v[r];
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
            for (int l = T - 1; l > 0; --l) idq[l][r] = idq[l - 1][r];
            idq[0][r] = idcur[r];
        }
        __syncthreads();
    };
    const int pend = c1 + T;
    for (int p = p0, k = 0; p < pend; p += 2, k += 2) {
        round(es_flag<false>{}, p, k);
        if (p + 1 < pend) round(es_flag<true>{}, p + 1, k + 1);
    }

    if (!ES_TB_SUMS) {
        // Passes queued after a stop returned at the start, as in the other form.
        if (blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && tid == 0) {
            if (!slot) {
                for (int i = 0; i < IT; ++i) hist[(iteration + i) % hist_len] = ES_NOT_MEASURED;
                ctl[0] = iteration + IT;
            }
            ctl[2] = (u64)out_buf;
        }
        return;
    }
    double block[2];
    block[0] = block_sum((double)res2);
    __syncthreads();
    block[1] = block_sum((double)v2);
    __syncthreads();
    double total[2];
    if (!grid_sums_last_block<2>(block, partials, ticket, total)) return;
    if (slot) {
        // A slab's pass: es_record adds every slab's sums and decides; the sums of the
        // pass's iteration i at slot + i·slot_step (the last one's only).
        slot[(IT - 1) * slot_step] = total[0];
        slot[(IT - 1) * slot_step + 1] = total[1];
        ctl[2] = (u64)out_buf;
        return;
    }
    for (int i = 0; i < IT - 1; ++i) hist[(iteration + i) % hist_len] = ES_NOT_MEASURED;
    double rel;
    const int flag = residual_verdict(total[0], total[1], tol, rel);
    hist[(iteration + IT - 1) % hist_len] = rel;
    ctl[2] = (u64)out_buf;
    ctl[0] = iteration + IT;
    if (flag) ctl[1] = flag;
}
#endif
