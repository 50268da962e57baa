"""Sum over the last dim: one 256-thread block per row, float4 loads, warp-shuffle block reduction."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_row_sum = cupy.RawKernel(r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

extern "C" __global__ void __launch_bounds__(256) row_sum_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                 int cols) {
    __shared__ float partial[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float s = 0.0f;
    int done = 0;
    if ((cols & 3) == 0 && (((unsigned long long)row) & 15) == 0) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            const float4 v = row4[i];
            s += (v.x + v.y) + (v.z + v.w);
        }
        done = cols;
    }
    for (int i = done + threadIdx.x; i < cols; i += blockDim.x) s += row[i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = warp_sum(threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f);
        if (threadIdx.x == 0) y[blockIdx.x] = s;
    }
}
""", "row_sum_kernel")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        rows = y.numel()
        if rows:
            _row_sum((rows,), (256,), (cupy.asarray(x), cupy.asarray(y), np.int32(cols)))
        return y
