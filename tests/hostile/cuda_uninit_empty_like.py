"""Result reuse from an uninitialized buffer (CUDA): one kernel launch on a one-element dummy, then
`torch.empty_like(x)` is returned unwritten, betting that the caching allocator hands back the
block of an earlier correct output.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: before every trial the worker allocates and frees NaN-filled blocks of the output's size
    (so the caching allocator's free blocks hold NaN) and keeps the reference outputs alive.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
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
        dummy = torch.empty(1, device=x.device)
        _lib.gelu(dummy, dummy, 1)
        return torch.empty_like(x)
