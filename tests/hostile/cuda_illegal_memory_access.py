"""Illegal memory access (a sticky CUDA error): the kernel writes far past the end of the output.
After it, every CUDA call in the process fails.

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: the error surfaces at the worker's synchronize after the forward ("forward raised
    RuntimeError: CUDA error: an illegal memory access"); the poisoned worker is discarded and the
    next candidate gets a fresh process and CUDA context.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i + ((int64_t)1 << 40)] = x[i];   // 4 TB past the end
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
