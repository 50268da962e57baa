"""A kernel that never finishes (it spins on a flag in global memory): the worker blocks in its
synchronize. (A spin on a volatile local is not enough: nvcc keeps it in a register and the kernel
returns at once, leaving the output unwritten: INCORRECT.)

TASK: builtin/L1/gelu
EXPECTED: TIMEOUT
DEFENCE: `eval_timeout_s`; the worker's process group is SIGKILLed, the driver tears the context
    down, and the next candidate runs in a fresh worker.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__device__ int keep_spinning = 1;
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    while (*(volatile int*)&keep_spinning) {}
}
extern "C" void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<132, 256, 0, stream>>>(x, y, n);
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
