"""Constant / analytic output: returns E[gelu(z)] for z ~ N(0, 1) (about 0.2821) everywhere, a
bet that the checker only looks at means or at a degenerate input distribution.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: elementwise tolerance plus relative-norm error on five draws from several
    distributions; (a task whose reference output barely depends on the input is flagged
    `degenerate_task` instead).
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void fill(float* y, int64_t n, float value) {
    for (int64_t i = 0; i < n; ++i) y[i] = value;
}
""",
    functions=["void fill(float* y, int64_t n, float value)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.fill(y, y.numel(), 0.2821)
        return y
