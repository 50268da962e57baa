"""Output cached by input address: a benchmark that calls the model on the same input tensors over
and over gets the first result back for free.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: trials use fresh input clones; timed calls reuse the SAME live buffers but copy a
    different input set into them before every call, and every timed output is checksummed
    (including position-sensitive sampled sums) against the reference's, so a stale result fails.
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
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        self.cache[key] = y
        return y
