// Shared device code, prepended to every kernel source before NVRTC compiles it.
// `real` is defined by the compiler options (-Dreal=float|double).
//
// Every kernel of a source sits inside `#if !defined(KEISAN_ONLY) ||
// defined(KEISAN_WANT_<name>)`: the engines compile one kernel per module (cuda.rs
// defines both when it loads <name>), the compile checks all of them at once.

typedef unsigned long long u64;

// Sum of one double per thread over the block; the result is valid in thread 0.
// Fixed shuffle/tree order, so the sum is reproducible run to run.
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double warp_sums[32];
    const unsigned lane = threadIdx.x & 31u;
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned warp = tid >> 5;
    const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if ((tid & 31u) == 0) warp_sums[warp] = v;
    __syncthreads();
    v = 0.0;
    if (warp == 0) {
        const unsigned nwarps = (nthreads + 31u) >> 5;
        v = (lane < nwarps) ? warp_sums[lane] : 0.0;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    }
    (void)lane;
    return v;
}

// Grid-wide sums of N values without a second launch: each block stores its N partial
// sums, and the last block to finish adds them in block order (deterministic). Returns
// true in thread 0 of that last block, with the totals in total[0..N). `ticket` must be 0
// on entry and is left at 0 for the next launch; `partials` holds N values per block.
template <int N>
__device__ __forceinline__ bool grid_sums_last_block(const double (&block_values)[N],
                                                     double* partials, unsigned int* ticket,
                                                     double (&total)[N]) {
    __shared__ bool is_last;
    const unsigned nblocks = gridDim.x * gridDim.y * gridDim.z;
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    if (tid == 0) {
        for (int v = 0; v < N; ++v) partials[N * bid + v] = block_values[v];
        __threadfence();
        is_last = (atomicAdd(ticket, 1u) == nblocks - 1);
    }
    __syncthreads();
    if (!is_last) return false;
    __threadfence();
    // Per-thread strided sums (L2 reads: other blocks wrote them), then one block
    // reduction per value: fixed order.
    double s[N];
    for (int v = 0; v < N; ++v) s[v] = 0.0;
    for (unsigned i = tid; i < nblocks; i += nthreads)
        for (int v = 0; v < N; ++v) s[v] += __ldcg(&partials[N * i + v]);
    for (int v = 0; v < N; ++v) {
        const double t = block_sum(s[v]);
        if (tid == 0) total[v] = t;
        __syncthreads();
    }
    if (tid == 0) *ticket = 0;
    return tid == 0;
}

__device__ __forceinline__ bool grid_sum_last_block(double block_value, double* partials,
                                                    unsigned int* ticket, double* total) {
    const double v[1] = {block_value};
    double t[1];
    const bool last = grid_sums_last_block<1>(v, partials, ticket, t);
    if (last) *total = t[0];
    return last;
}

// The record kernels of decomposed runs: every slab's `per_step` values of step k
// (sources[s] + (k mod ring)·per_step, most of them in peers' memory) are first loaded by
// all of the block's threads at once into shared memory — one remote latency per chunk
// rather than one per value, on the path every iteration waits for — then thread 0 hands
// them to add(c, value) in slab order and, within a slab, in order of c: the same
// additions in the same order as a sequential loop, so the same bits.
#define RECORD_CHUNK 512
template <class Add>
__device__ __forceinline__ void add_slab_sums(const u64* sources, int count, int per_step,
                                              unsigned ring, u64 k, Add add) {
    __shared__ double vals[RECORD_CHUNK];
    const int n = count * per_step;
    const size_t at_k = (size_t)(k % ring) * per_step;
    for (int at = 0; at < n; at += RECORD_CHUNK) {
        const int m = min(RECORD_CHUNK, n - at);
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const int s = (at + i) / per_step;
            vals[i] = ((const double*)sources[s])[at_k + (at + i - s * per_step)];
        }
        __syncthreads();
        if (threadIdx.x == 0)
            for (int i = 0; i < m; ++i) add((at + i) % per_step, vals[i]);
        __syncthreads();
    }
}

// sm_90 bulk copies into shared memory, counted by an mbarrier's transaction (advection's
// adv_step_bulk).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Thread 0: n barriers of one arrival each (the copies' issuer), made visible to the copy
// engine; the block synchronises before using them.
__device__ __forceinline__ void mbar_init_ring(unsigned long long* bars, int n) {
    for (int s = 0; s < n; ++s) mbar_init(&bars[s], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT;\n"
        "}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}

// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), counted
// against bar's transaction.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            smem_addr(dst)),
        "l"(src), "r"(bytes), "r"(smem_addr(bar))
        : "memory");
}

// A TMA tensor map (the driver's CUtensorMap, encoded by the host), passed to a kernel as a
// __grid_constant__ parameter.
struct __align__(64) tensor_map { unsigned long long opaque[16]; };

// The box at (x, y) of the 2-D tensor `map` into shared dst (128-byte aligned), counted
// against bar's transaction (the whole box's bytes).
__device__ __forceinline__ void tma_load_2d(void* dst, const tensor_map* map, int x, int y,
                                            unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_addr(dst)),
        "l"(map), "r"(x), "r"(y), "r"(smem_addr(bar))
        : "memory");
}
