"""Slowing the reference through a global switch it runs under: an honest kernel whose forward
turns the fused scaled-dot-product attention backends (flash, memory-efficient, cuDNN) back on when
it starts and off when it returns, so that a reference timed beside it in the same process (the
paired timing) would run math attention. The switches are not on any hand-written list.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: switches.py finds every global switch torch exposes (torch._C's getters, the whole
    torch.backends tree) and reads them before the candidate loads; one that differs after a
    candidate call (each phase, each trial, each paired call) is tampering.
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
_SDP = (torch.backends.cuda.enable_flash_sdp, torch.backends.cuda.enable_mem_efficient_sdp,
        torch.backends.cuda.enable_cudnn_sdp)


class ModelNew(nn.Module):
    def forward(self, x):
        for enable in _SDP:
            enable(True)
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        for enable in _SDP:
            enable(False)
        return y
