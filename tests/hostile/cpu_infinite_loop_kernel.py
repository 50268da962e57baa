"""Kernel that loops forever (a volatile spin the optimizer cannot remove), on every OpenMP thread.

TASK: builtin/L1/gelu
EXPECTED: TIMEOUT
DEFENCE: the evaluation runs under `eval_timeout_s`; on expiry the worker's process group is
    SIGKILLed (a native loop ignores Python-level interrupts) and a fresh worker takes the next job.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel
    {
        volatile int spin = 1;
        while (spin) {}
    }
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
