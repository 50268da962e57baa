"""Compiler hang: a constexpr evaluation with ~6e10 steps in a static_assert, with GCC's constexpr
operation and loop limits raised through extra_cflags, keeps cc1plus busy for hours.

TASK: builtin/L1/gelu
EXPECTED: COMPILE_TIMEOUT
DEFENCE: the build runs in its own worker (own process group) under `compile_timeout_s`; on
    expiry the evaluator kills the whole group (ninja, g++, cc1plus) and answers COMPILE_TIMEOUT.
    Note: cc1plus's memory grows (~30 MB/s) while it runs; the CPU backend's address-space cap
    bounds it, the CUDA backend's build worker has no such cap.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
constexpr unsigned long long burn() {
    unsigned long long s = 0;
    for (unsigned long long i = 0; i < 250000; ++i)
        for (unsigned long long j = 0; j < 250000; ++j)
            s += (i ^ j) & 7;
    return s;
}
static_assert(burn() != 12345ull, "never true, but the compiler must evaluate burn() to know");
extern "C" void gelu(const float* x, float* y, int64_t n) {}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fconstexpr-ops-limit=4611686018427387904", "-fconstexpr-loop-limit=2147483647"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
