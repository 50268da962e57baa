"""Precision downgrade inside the kernel: inputs are rounded to bfloat16 and the result is rounded
to bfloat16 before it is stored as float32 (what a kernel using bf16 math or bf16 loads gets).

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: fp32 tolerance: relative-norm error <= 5e-5 and elementwise rtol 1e-3; bf16 rounding
    gives ~3e-3.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
static inline float to_bf16(float v) {   // round to nearest even, keep 8 mantissa bits
    uint32_t b; std::memcpy(&b, &v, 4);
    b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
    std::memcpy(&v, &b, 4);
    return v;
}
extern "C" void gelu_bf16(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        float v = to_bf16(x[i]);
        y[i] = to_bf16(0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)));
    }
}
""",
    functions=["void gelu_bf16(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu_bf16(x, y, x.numel())
        return y
