"""Zeroing inputs: computes the right output, then zeroes the input, so that a harness that runs
the reference AFTER the candidate (on the same, now zeroed, tensors) gets gelu(0) = 0 everywhere
and a candidate that returns zeros would pass.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: reference outputs are computed before any candidate code is loaded, on private copies;
    inputs are checked unchanged after every trial.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" void gelu_then_zero(float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
    std::memset(x, 0, sizeof(float) * n);
}
""",
    functions=["void gelu_then_zero(float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu_then_zero(x, y, x.numel())
        return y
