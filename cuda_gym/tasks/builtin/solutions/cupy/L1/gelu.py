"""Exact (erf) GELU: one CuPy RawKernel, grid-stride float4 loads/stores (scalar where unaligned)."""
import cupy
import numpy as np
import torch
import torch.nn as nn

_gelu = cupy.RawKernel(r"""
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

extern "C" __global__ void __launch_bounds__(256) gelu_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                              long long n) {
    const long long start = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long done = 0;
    if ((((unsigned long long)x | (unsigned long long)y) & 15) == 0) {
        const long long n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (long long i = start; i < n4; i += stride) {
            const float4 v = x4[i];
            y4[i] = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
        }
        done = 4 * n4;
    }
    for (long long i = done + start; i < n; i += stride) y[i] = gelu(x[i]);
}
""", "gelu_kernel")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        blocks = max(1, min((n // 4 + 255) // 256, 65535))
        # CuPy views of the tensors (no copy: __cuda_array_interface__); scalars as numpy types
        _gelu((blocks,), (256,), (cupy.asarray(x), cupy.asarray(y), np.int64(n)))
        return y
