"""A kernel that writes nothing: the output buffer is passed to a native function whose body is
empty (or returns early), so whatever the allocator left there is returned.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: whole-output comparison with the reference after NaN-poisoning the allocator's blocks.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    if (n > 0) return;  // "fast path": nothing is computed
    y[0] = x[0];
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
