// Shared device code, prepended to every kernel source before NVRTC compiles it.
// `real` is defined by the compiler options (-Dreal=float|double).

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

// Grid-wide sum without a second launch: each block stores its partial sum, and the
// last block to finish adds them all in index order (deterministic). Returns true in
// thread 0 of that last block, with the total in *total. `ticket` must be 0 on entry
// and is left at 0 for the next launch.
__device__ __forceinline__ bool grid_sum_last_block(double block_value, double* partials,
                                                    unsigned int* ticket, double* total) {
    __shared__ bool is_last;
    const unsigned nblocks = gridDim.x * gridDim.y * gridDim.z;
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    if (tid == 0) {
        partials[bid] = block_value;
        __threadfence();
        is_last = (atomicAdd(ticket, 1u) == nblocks - 1);
    }
    __syncthreads();
    if (!is_last) return false;
    __threadfence();
    // Per-thread strided sums, then one block reduction: fixed order.
    double s = 0.0;
    for (unsigned i = tid; i < nblocks; i += nthreads) s += ((volatile double*)partials)[i];
    s = block_sum(s);
    if (tid == 0) {
        *total = s;
        *ticket = 0;
    }
    return tid == 0;
}

// As grid_sum_last_block, for two sums at once; partials holds 2 values per block.
__device__ __forceinline__ bool grid_sum2_last_block(double a, double b, double* partials,
                                                     unsigned int* ticket, double* ta,
                                                     double* tb) {
    __shared__ bool is_last;
    const unsigned nblocks = gridDim.x * gridDim.y * gridDim.z;
    const unsigned bid = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
    if (tid == 0) {
        partials[2 * bid] = a;
        partials[2 * bid + 1] = b;
        __threadfence();
        is_last = (atomicAdd(ticket, 1u) == nblocks - 1);
    }
    __syncthreads();
    if (!is_last) return false;
    __threadfence();
    double sa = 0.0, sb = 0.0;
    for (unsigned i = tid; i < nblocks; i += nthreads) {
        sa += ((volatile double*)partials)[2 * i];
        sb += ((volatile double*)partials)[2 * i + 1];
    }
    sa = block_sum(sa);
    __syncthreads();
    sb = block_sum(sb);
    if (tid == 0) {
        *ta = sa;
        *tb = sb;
        *ticket = 0;
    }
    return tid == 0;
}
