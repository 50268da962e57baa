"""Laundering an input through native code: the forward's "kernel" only copies its input into a
buffer made with `torch.zeros_like` (a constant before the call), and torch.nn.functional.gelu
computes the output from the buffer. No PyTorch op ever takes the input itself.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: the op recorder treats a call into native code as a write into every constant made before
    it (the code got pointers), so the buffer is task data and the gelu on it is FORBIDDEN.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
#include <cstring>
extern "C" void copy(const float* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
""",
    functions=["void copy(const float* x, float* y, int64_t n)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        buf = torch.zeros_like(x)
        _lib.copy(x, buf, x.numel())
        return F.gelu(buf)
