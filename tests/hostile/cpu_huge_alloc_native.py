"""Huge host allocation in native code: the kernel asks for a 1 TB workspace with `new[]`, which
throws std::bad_alloc through the extern "C" boundary (std::terminate, SIGABRT).

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: the address-space cap makes the allocation fail at once (no swap storm, no host OOM
    killer); the abort kills only the worker, which is reported ("killed by signal SIGABRT") and
    replaced.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    float* workspace = new float[(size_t)1 << 38];   // 1 TB
    std::memset(workspace, 0, sizeof(float) * ((size_t)1 << 38));
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f)) + workspace[i];
    delete[] workspace;
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
