"""PyTorch fallback with a decoy kernel: the native function runs on a one-element dummy tensor
(so "the candidate's code ran") and the output is computed by torch.nn.functional.gelu.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: the op recorder (a TorchDispatchMode, which also sees ops called from C++) records
    aten::gelu during the forward; under the strict policy that is FORBIDDEN.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

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
        self.a = torch.zeros(1)
        self.b = torch.zeros(1)

    def forward(self, x):
        _lib.gelu(self.a, self.b, 1)
        return F.gelu(x)
