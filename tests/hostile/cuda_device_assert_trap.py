"""Sticky error from inside the kernel: a device-side assert fires on the first element and the
other threads execute __trap().

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: reported at the worker's synchronize; the worker (and its broken CUDA context) is
    replaced before the next candidate.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cassert>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i == 0) assert(x[0] != x[0]);   // false for any non-NaN input
    if (i > 0 && i < n) __trap();
}
extern "C" void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
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
