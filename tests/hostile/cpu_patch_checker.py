"""Monkey-patching the checker: torch.allclose / torch.equal always say "equal" (which also hides
input mutation from an input-unchanged check that uses torch.equal), and the kernel writes its
result into the input and returns it.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: TamperCheck snapshots the torch module dict (and the identity of torch.equal and other
    relied-on functions) before the candidate loads; the change is reported with the first look
    (the forward on trial 0's draw, before the timing) and the verdict is FORBIDDEN. The
    comparison itself runs in the evaluator's process.
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

torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _lib.gelu_inplace(x, x.numel())
        return x
