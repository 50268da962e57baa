"""Sum over the last dim: a block (long rows) or a warp (short rows) per row, float4 loads, warp-shuffle reduction."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Partial sum of row elements [lane0, n) owned by this thread, with stride `step` in units of V floats.
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

// One block per row (rows with many columns).
template <int V>
__global__ void __launch_bounds__(512) sum_rows_block_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                             int cols) {
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    float v = partial_sum<V>(x + row * cols, cols, threadIdx.x, blockDim.x);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = warp_sum(lane < nw ? red[lane] : 0.0f);
        if (lane == 0) y[row] = v;
    }
}

// One warp per row (short rows): 8 rows per 256-thread block.
template <int V>
__global__ void __launch_bounds__(256) sum_rows_warp_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int rows, int cols) {
    const int64_t row = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int lane = threadIdx.x & 31;
    float v = warp_sum(partial_sum<V>(x + row * cols, cols, lane, 32));
    if (lane == 0) y[row] = v;
}

extern "C" int sum_dim_forward(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0) return 0;
    if (cols <= 0) {
        cudaMemsetAsync(y, 0, (size_t)rows * sizeof(float), stream);
        return (int)cudaGetLastError();
    }
    const bool vec = (cols % 4 == 0) && ((reinterpret_cast<uintptr_t>(x) & 15) == 0);
    if (cols < 2048) {
        const int blocks = (rows + 7) / 8;
        if (vec) sum_rows_warp_kernel<4><<<blocks, 256, 0, stream>>>(x, y, rows, cols);
        else sum_rows_warp_kernel<1><<<blocks, 256, 0, stream>>>(x, y, rows, cols);
    } else {
        const int nv = vec ? cols / 4 : cols;
        int threads = ((nv + 15) / 16 + 31) / 32 * 32;  // about 16 accesses per thread
        if (threads > 512) threads = 512;
        if (threads < 64) threads = 64;
        if (vec) sum_rows_block_kernel<4><<<rows, threads, 0, stream>>>(x, y, cols);
        else sum_rows_block_kernel<1><<<rows, threads, 0, stream>>>(x, y, cols);
    }
    return (int)cudaGetLastError();
}
""",
    functions=["int sum_dim_forward(const float* x, float* y, int rows, int cols, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        cols = x.shape[-1]
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        rows = y.numel()
        err = _lib.sum_dim_forward(x, y, rows, cols)
        if err:
            raise RuntimeError(f"sum kernel launch failed: CUDA error {err}")
        return y
