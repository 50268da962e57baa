"""A kernel that never finishes (a volatile spin): the worker blocks in its synchronize.

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
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    volatile int spin = 1;
    while (spin) {}
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
