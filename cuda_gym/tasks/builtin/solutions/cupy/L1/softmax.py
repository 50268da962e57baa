"""Row softmax over the last dim: one 512-thread block per row, three passes (max, sum of exp, write)."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_softmax = cupy.RawKernel(r"""
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
// Every thread gets the block's result; `red` is reusable after the call.
__device__ __forceinline__ float block_max(float v, float* red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_max((threadIdx.x & 31) < (blockDim.x >> 5) ? red[threadIdx.x & 31] : -__int_as_float(0x7f800000));
}
__device__ __forceinline__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum((threadIdx.x & 31) < (blockDim.x >> 5) ? red[threadIdx.x & 31] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(512) softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                 int cols) {
    __shared__ float red[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, row[i]);
    m = block_max(m, red);
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += expf(row[i] - m);
    const float inv = 1.0f / block_sum(s, red);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = expf(row[i] - m) * inv;
}
""", "softmax_kernel")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if rows:
            _softmax((rows,), (512,), (cupy.asarray(x), cupy.asarray(y), np.int32(cols)))
        return y
