"""Output cached by shape: the first computed output is returned for every later call with the same
input shape (the "the benchmark always feeds the same tensor" bet).

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
MESSAGE: trial 1
DEFENCE: five correctness trials on different draws (draws.py: the task's own inputs, then four
    more of other values and distributions). The first call is the judge's first look at trial 0's
    draw, so the cached output is right for trial 0 (after the timing, whose calls all get it back
    and whose digests would fail it too), and trial 1, the first checked call on a different draw,
    fails.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.by_shape = {}

    def forward(self, x):
        y = self.by_shape.get(tuple(x.shape))
        if y is None:
            y = torch.empty_like(x)
            _lib.gelu(x, y, x.numel())
            self.by_shape[tuple(x.shape)] = y
        return y
