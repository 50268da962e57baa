"""A kernel that writes nothing (CUDA): one block whose threads all return at a "bounds check" that
is always true, so the output buffer keeps whatever the caching allocator left in it.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: NaN-poisoned allocator blocks and a whole-output comparison (on the device, with a
    sample also compared in the evaluator's process).
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    if (n > 0) return;
    y[0] = x[0];
}
extern "C" void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<1, 32, 0, stream>>>(x, y, n);
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
