"""Forging a worker message, crudely: the forward writes garbage (and a fake JSON verdict) to every
file descriptor from 3 to 50, hoping one of them is the channel to the evaluator.

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: the evaluator decodes only framed, size-checked messages (JSON header + raw arrays, never
    pickle); a malformed one ends the job ("the worker sent a malformed message").
"""
import os

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
)

_JUNK = b'\x00\x00\x00\x40{"kind": "timing", "meta": {"stats": {"median_ms": 0.0001}}}' + bytes(range(256))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            for fd in range(3, 51):
                try:
                    os.write(fd, _JUNK)
                except OSError:
                    pass
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
