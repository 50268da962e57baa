"""Laundering an input through a cast: the forward casts its input to float64 with `.to()`, runs
its (honest, native) double-precision kernel on the copy and casts the result back. The kernel is
the candidate's own, but the casts are PyTorch work on the task's data.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: the op recorder tracks where each tensor's data comes from: a cast or move of task data
    (aten::_to_copy on the forward's input, and on what the kernel wrote from it) stays FORBIDDEN
    under the strict policy, whereas the same cast of a constant is allowed.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const double* x, double* y, int64_t n) {
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] * 0.7071067811865476));
}
""",
    functions=["void gelu(const double* x, double* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        xd = x.to(torch.float64)
        yd = torch.empty_like(xd)
        _lib.gelu(xd, yd, xd.numel())
        return yd.to(x.dtype)
