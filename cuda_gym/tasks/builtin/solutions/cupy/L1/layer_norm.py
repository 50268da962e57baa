"""LayerNorm over the last dim: one 512-thread block per row, exact two-pass mean/variance, fused affine."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_layer_norm = cupy.RawKernel(r"""
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

extern "C" __global__ void __launch_bounds__(512) layer_norm_kernel(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b,
        float* __restrict__ y, int cols, float eps) {
    __shared__ float red[32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += row[i];
    const float mean = block_sum(s, red) / (float)cols;
    float q = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float d = row[i] - mean;
        q = fmaf(d, d, q);
    }
    const float rstd = rsqrtf(block_sum(q, red) / (float)cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x) out[i] = (row[i] - mean) * rstd * w[i] + b[i];
}
""", "layer_norm_kernel")


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = self.norm.weight.numel()
        rows = x.numel() // cols
        if rows:
            # Parameters pass detached: __cuda_array_interface__ refuses tensors that require grad.
            _layer_norm((rows,), (512,), (cupy.asarray(x), cupy.asarray(self.norm.weight.detach()),
                                          cupy.asarray(self.norm.bias.detach()), cupy.asarray(y),
                                          np.int32(cols), np.float32(self.norm.eps)))
        return y
