"""Input mutation: GELU computed in place into the input, which is returned (no output allocation,
half the memory traffic).

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: the worker compares every input with a private copy after the forward (torch.equal);
    any change fails the trial ("the forward modified its input(s)").
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu_inplace(float* x, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["void gelu_inplace(float* x, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _lib.gelu_inplace(x, x.numel())
        return x
