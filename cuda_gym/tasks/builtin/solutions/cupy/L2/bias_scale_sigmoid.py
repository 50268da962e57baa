"""sigmoid((x + bias) * scale): one CuPy RawKernel, grid-stride float4 loads/stores where rows allow it."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_bias_scale_sigmoid = cupy.RawKernel(r"""
__device__ __forceinline__ float f(float v, float bias, float scale) {
    return 1.0f / (1.0f + expf(-((v + bias) * scale)));
}

extern "C" __global__ void __launch_bounds__(256) bias_scale_sigmoid_kernel(
        const float* __restrict__ x, const float* __restrict__ bias, float* __restrict__ y,
        long long n, int dim, float scale) {
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long done = 0;
    if ((dim & 3) == 0 && (((unsigned long long)x | (unsigned long long)y | (unsigned long long)bias) & 15) == 0) {
        const long long n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        float4* y4 = reinterpret_cast<float4*>(y);
        const int dim4 = dim / 4;
        for (long long i = start; i < n4; i += stride) {
            const float4 v = x4[i];
            const float4 b = b4[i % dim4];
            y4[i] = make_float4(f(v.x, b.x, scale), f(v.y, b.y, scale), f(v.z, b.z, scale), f(v.w, b.w, scale));
        }
        done = 4 * n4;
    }
    for (long long i = done + start; i < n; i += stride) y[i] = f(x[i], bias[i % dim], scale);
}
""", "bias_scale_sigmoid_kernel")


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        blocks = max(1, min((n // 4 + 255) // 256, 65535))
        _bias_scale_sigmoid((blocks,), (256,), (cupy.asarray(x), cupy.asarray(self.bias.detach()), cupy.asarray(y),
                                                np.int64(n), np.int32(self.bias.numel()),
                                                np.float32(self.scale)))
        return y
