"""Changing torch flags for later code: at construction the candidate enables TF32, lowers the
float32 matmul precision, sets the default dtype to float64 and drops torch to one thread, hoping
the evaluator's later checks or other code inherit the changed state.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: TamperCheck snapshots the precision flags, float32 matmul precision, thread count,
    default dtype, grad mode (and on CUDA the current device and stream) before the candidate
    loads; a change is FORBIDDEN.
"""
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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.set_float32_matmul_precision("medium")
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1)

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
