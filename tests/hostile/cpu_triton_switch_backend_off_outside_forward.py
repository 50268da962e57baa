"""Slowing the reference through a global switch, from a Triton candidate: an honest Triton GELU
whose forward turns oneDNN (mkldnn) and cuDNN back on when it starts and off when it returns, so
that a reference run beside it in the same process would run native convolutions.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: switches.py: every global switch torch exposes, read before the candidate loads; one that
    differs after a candidate call is tampering, whatever language the kernels are in.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        torch.backends.mkldnn.enabled = True
        torch.backends.cudnn.enabled = True
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        gelu_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block)
        torch.backends.mkldnn.enabled = False
        torch.backends.cudnn.enabled = False
        return y
