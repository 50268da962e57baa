"""LayerNorm(x + y): a RawModule whose templated kernel (one 512-thread block per row) adds the residual
in each of its two exact passes and in the fused affine write."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_module = cupy.RawModule(code=r"""
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

template <typename T>
__global__ void __launch_bounds__(512) residual_layer_norm(const T* __restrict__ x, const T* __restrict__ r,
                                                           const T* __restrict__ w, const T* __restrict__ b,
                                                           T* __restrict__ y, int cols, float eps) {
    __shared__ float red[32];
    const long long base = (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) s += x[base + i] + r[base + i];
    const float mean = block_sum(s, red) / (float)cols;
    float q = 0.0f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        const float d = (x[base + i] + r[base + i]) - mean;
        q = fmaf(d, d, q);
    }
    const float rstd = rsqrtf(block_sum(q, red) / (float)cols + eps);
    for (int i = threadIdx.x; i < cols; i += blockDim.x)
        y[base + i] = ((x[base + i] + r[base + i]) - mean) * rstd * w[i] + b[i];
}
""", options=("-std=c++17",), name_expressions=("residual_layer_norm<float>",))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        self._kernel = None

    def forward(self, x, y):
        if self._kernel is None:  # the module compiles on the first get_function
            self._kernel = _module.get_function("residual_layer_norm<float>")
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        cols = self.norm.weight.numel()
        rows = x.numel() // cols
        if rows:
            self._kernel((rows,), (512,), (cupy.asarray(x), cupy.asarray(y), cupy.asarray(self.norm.weight.detach()),
                                           cupy.asarray(self.norm.bias.detach()), cupy.asarray(out),
                                           np.int32(cols), np.float32(self.norm.eps)))
        return out
