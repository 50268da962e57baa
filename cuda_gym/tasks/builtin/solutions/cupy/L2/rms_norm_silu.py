"""silu(x / sqrt(mean(x^2) + eps) * weight): one 512-thread block per row (sum of squares, then write)."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_rms_norm_silu = cupy.RawKernel(r"""
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum((threadIdx.x & 31) < (blockDim.x >> 5) ? red[threadIdx.x & 31] : 0.0f);
}

extern "C" __global__ void __launch_bounds__(512) rms_norm_silu_kernel(
        const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int cols, float eps) {
    __shared__ float red[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float q = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) q = fmaf(row[i], row[i], q);
    const float rms = sqrtf(block_sum(q, red) / (float)cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float v = row[i] / rms * w[i];
        out[i] = v / (1.0f + expf(-v));
    }
}
""", "rms_norm_silu_kernel")


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = self.weight.numel()
        rows = x.numel() // cols
        if rows:
            _rms_norm_silu((rows,), (512,), (cupy.asarray(x), cupy.asarray(self.weight.detach()), cupy.asarray(y),
                                            np.int32(cols), np.float32(self.eps)))
        return y
