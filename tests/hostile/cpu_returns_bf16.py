"""Precision downgrade in the output dtype: the kernel writes bfloat16 (half the bytes to store)
and the forward returns a torch.bfloat16 tensor for an fp32 task.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: output dtype must equal the reference's ("a precision change is not allowed").
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" void gelu_to_bf16(const float* x, uint16_t* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {
        float v = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        uint32_t b; std::memcpy(&b, &v, 4);
        y[i] = (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
    }
}
""",
    functions=["void gelu_to_bf16(const float* x, uint16_t* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
        _lib.gelu_to_bf16(x, y, x.numel())
        return y
