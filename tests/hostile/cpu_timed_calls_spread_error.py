"""Checked calls exact, timed calls with a spread error inside the elementwise bound: when no
profiler runs (timed calls), every element is off by 2e-4 of itself, its sign from a hash of its
position. Each element stays within the elementwise bound (1e-3 relative), the sums barely move,
and the relative-norm error, 2e-4, is four times the fp32 policy's 5e-5: what TF32 arithmetic gives.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: the digest's sketch (output_digest): every element, with a secret random sign, summed
    into buckets; the sketched difference estimates the relative-norm error over every element.
"""
import torch
import torch.autograd.profiler as profiler
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n, int64_t noisy) {
    for (int64_t i = 0; i < n; ++i) {
        float v = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        uint32_t h = (uint32_t)i * 2654435761u;
        y[i] = noisy ? v * (1.0f + ((h >> 16) & 1 ? 2e-4f : -2e-4f)) : v;
    }
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n, int64_t noisy)"],
)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel(), 0 if profiler._is_profiler_enabled else 1)
        return y
