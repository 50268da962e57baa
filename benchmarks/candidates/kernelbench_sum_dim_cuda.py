"""Sum over the last dimension in KernelBench's load_inline form: a block or a warp per row, warp-shuffle reductions."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

sum_dim_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cstdint>

constexpr int kWarpRowsPerBlock = 8;  // the warp kernels run 256 threads, one warp per row

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// This thread's partial sum of a row of n floats: elements start, start + step, ... in units of V floats.
template <int V>
__device__ __forceinline__ float partial_sum(const float* __restrict__ xr, int n, int start, int step) {
    const int nv = n / V;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    if constexpr (V == 4) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        int i = start;
        // Two independent float4 loads per iteration keep more bytes in flight.
        for (; i + step < nv; i += 2 * step) {
            const float4 p = x4[i];
            const float4 q = x4[i + step];
            a0 += p.x + q.x;
            a1 += p.y + q.y;
            a2 += p.z + q.z;
            a3 += p.w + q.w;
        }
        if (i < nv) {
            const float4 p = x4[i];
            a0 += p.x;
            a1 += p.y;
            a2 += p.z;
            a3 += p.w;
        }
    } else {
        int i = start;
        for (; i + 3 * step < nv; i += 4 * step) {
            a0 += xr[i];
            a1 += xr[i + step];
            a2 += xr[i + 2 * step];
            a3 += xr[i + 3 * step];
        }
        for (; i < nv; i += step) a0 += xr[i];
    }
    return (a0 + a1) + (a2 + a3);
}

// One block per row (long rows).
template <int V>
__device__ __forceinline__ void sum_row_by_block(const float* __restrict__ x, float* __restrict__ y, int cols,
                                                 float* red) {
    const int64_t row = blockIdx.x;
    float v = warp_sum(partial_sum<V>(x + row * cols, cols, threadIdx.x, blockDim.x));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < nw ? red[lane] : 0.0f);
        if (lane == 0) y[row] = v;
    }
}

// One warp per row (short rows).
template <int V>
__device__ __forceinline__ void sum_row_by_warp(const float* __restrict__ x, float* __restrict__ y, int rows,
                                                int cols) {
    const int64_t row = (int64_t)blockIdx.x * kWarpRowsPerBlock + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int lane = threadIdx.x & 31;
    const float v = warp_sum(partial_sum<V>(x + row * cols, cols, lane, 32));
    if (lane == 0) y[row] = v;
}

__global__ void __launch_bounds__(512) sum_rows_block_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                           int cols) {
    __shared__ float red[32];
    sum_row_by_block<4>(x, y, cols, red);
}

__global__ void __launch_bounds__(512) sum_rows_block_scalar(const float* __restrict__ x, float* __restrict__ y,
                                                             int cols) {
    __shared__ float red[32];
    sum_row_by_block<1>(x, y, cols, red);
}

__global__ void __launch_bounds__(256) sum_rows_warp_vec4(const float* __restrict__ x, float* __restrict__ y,
                                                          int rows, int cols) {
    sum_row_by_warp<4>(x, y, rows, cols);
}

__global__ void __launch_bounds__(256) sum_rows_warp_scalar(const float* __restrict__ x, float* __restrict__ y,
                                                            int rows, int cols) {
    sum_row_by_warp<1>(x, y, rows, cols);
}

torch::Tensor sum_dim_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() >= 1,
                "sum_dim: expected a contiguous float32 CUDA tensor with at least one dimension");
    auto out_sizes = x.sizes().vec();
    out_sizes.pop_back();
    auto y = torch::empty(out_sizes, x.options());
    const int cols = (int)x.size(-1);
    const int rows = (int)y.numel();
    if (rows == 0) return y;
    if (cols == 0) return y.zero_();

    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const bool vec = cols % 4 == 0 && (reinterpret_cast<uintptr_t>(xp) & 15) == 0;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (cols < 2048) {  // short rows: a warp each; long rows: a block each
        const int blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
        if (vec) {
            sum_rows_warp_vec4<<<blocks, 32 * kWarpRowsPerBlock, 0, stream>>>(xp, yp, rows, cols);
        } else {
            sum_rows_warp_scalar<<<blocks, 32 * kWarpRowsPerBlock, 0, stream>>>(xp, yp, rows, cols);
        }
    } else {
        const int nv = vec ? cols / 4 : cols;
        int threads = ((nv + 15) / 16 + 31) / 32 * 32;  // about 16 loads per thread, 64 to 512 threads
        threads = std::max(64, std::min(512, threads));
        if (vec) {
            sum_rows_block_vec4<<<rows, threads, 0, stream>>>(xp, yp, cols);
        } else {
            sum_rows_block_scalar<<<rows, threads, 0, stream>>>(xp, yp, cols);
        }
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

sum_dim_cpp_source = "torch::Tensor sum_dim_forward(torch::Tensor x);"

sum_dim = load_inline(
    name="sum_dim_kernelbench_format",
    cpp_sources=sum_dim_cpp_source,
    cuda_sources=sum_dim_cuda_source,
    functions=["sum_dim_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return sum_dim.sum_dim_forward(x.contiguous())
