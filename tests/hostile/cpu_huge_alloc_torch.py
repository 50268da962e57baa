"""Huge allocation through PyTorch: a 10^12-element (4 TB) scratch tensor in the forward.

TASK: builtin/L1/gelu
EXPECTED: OUT_OF_MEMORY
DEFENCE: CPU workers run under an address-space cap (RLIMIT_AS, `cpu_memory_limit_gb`), so the
    allocation fails at once instead of pushing the host into swap or the OOM killer; the worker
    classifies allocator failures ("can't allocate memory", torch.OutOfMemoryError, MemoryError)
    as OUT_OF_MEMORY.
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

    def forward(self, x):
        workspace = torch.empty(10**12, dtype=torch.float32, device=x.device)
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y + 0 * workspace[0]
