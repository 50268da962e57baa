"""Precision downgrade inside the kernel (CUDA): inputs are rounded to TF32 (10 mantissa bits, what
tensor-core TF32 math does to fp32 operands) before the GELU is evaluated.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: the fp32 policy's tolerance (relative-norm error <= 5e-5); TF32 rounding gives ~5e-4.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__device__ __forceinline__ float to_tf32(float v) {
    unsigned int b = __float_as_uint(v);
    b = (b + 0x1000u) & 0xFFFFE000u;   // round to 10 mantissa bits
    return __uint_as_float(b);
}
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = to_tf32(x[i]);
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

extern "C" void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<1024, 256, 0, stream>>>(x, y, n);
}
''',
    functions=["void gelu(const float* x, float* y, int64_t n, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
