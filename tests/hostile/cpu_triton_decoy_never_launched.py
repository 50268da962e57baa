"""A decoy Triton kernel: a `@triton.jit` GELU is defined (so the source "is a Triton
candidate") but never launched; torch.nn.functional.gelu does the work.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: the op recorder records aten::gelu on the forward input (strict: PyTorch compute on task
    data), and no Triton launch was counted as a call of the candidate's own code
    (cuda_gym/eval/triton_support.py).
"""
import torch.nn as nn
import torch.nn.functional as F
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
        return F.gelu(x)
