"""builtin/L1/softmax: device helpers, __launch_bounds__, a shared constant, CHECK macros, dynamic
shared memory on torch's current stream, -O3 for both compilers."""
# EXPECTED_FORM = "split"
# TASK = "builtin/L1/softmax"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cfloat>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")

constexpr int kThreads = 256;  // threads per row; the launch below and the kernel agree on it

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}

/* One block per row: max, then sum of exp, then the normalised values. "}" in a comment. */
__global__ void __launch_bounds__(kThreads) softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    extern __shared__ float scratch[];
    const float* row = x + (size_t)blockIdx.x * cols;
    float* out = y + (size_t)blockIdx.x * cols;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, row[c]);
    m = warp_max(m);
    if (lane == 0) scratch[warp] = m;
    __syncthreads();
    m = lane < kThreads / 32 ? scratch[lane] : -FLT_MAX;
    m = warp_max(m);
    __syncthreads();

    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += __expf(row[c] - m);
    s = warp_sum(s);
    if (lane == 0) scratch[warp] = s;
    __syncthreads();
    s = lane < kThreads / 32 ? scratch[lane] : 0.f;
    s = warp_sum(s);

    float inv = 1.f / s;
    #pragma unroll 4
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = __expf(row[c] - m) * inv;
}

torch::Tensor softmax_forward(torch::Tensor x) {
    CHECK_CUDA(x);
    CHECK_CONTIGUOUS(x);
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    size_t shared = (kThreads / 32) * sizeof(float);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    softmax_rows<<<rows, kThreads, shared, stream>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

softmax = load_inline(
    name="softmax_warp_reduce",
    cpp_sources="torch::Tensor softmax_forward(torch::Tensor x);",
    cuda_sources=softmax_source,
    functions=["softmax_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax.softmax_forward(x.contiguous())
