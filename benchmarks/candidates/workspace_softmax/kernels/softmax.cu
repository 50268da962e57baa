// Row-wise softmax, one 1024-thread block per row: max, sum of exp, then scaled exp, each a strided
// pass over the row (re-reads hit L2) with warp-shuffle block reductions. fp32 throughout (expf).
#include <cuda_runtime.h>
#include <cstdint>
#include <cfloat>

namespace {
constexpr int kThreads = 1024;

__device__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// The block's reduction of v (max or sum), returned to every thread.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = kMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < (blockDim.x >> 5) ? shared[lane] : (kMax ? -FLT_MAX : 0.f);
    if (warp == 0) v = kMax ? warp_max(v) : warp_sum(v);
    if (threadIdx.x == 0) shared[0] = v;
    __syncthreads();
    float result = shared[0];
    __syncthreads();
    return result;
}

__global__ void __launch_bounds__(kThreads) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                          int64_t cols) {
    __shared__ float shared[32];
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float m = -FLT_MAX;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
    m = block_reduce<true>(m, shared);
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += expf(row[c] - m);
    s = block_reduce<false>(s, shared);
    const float inv = 1.f / s;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) * inv;
}
}  // namespace

int softmax_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    softmax_rows<<<(unsigned)rows, kThreads, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
