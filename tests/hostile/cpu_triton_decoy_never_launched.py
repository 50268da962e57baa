"""A decoy Triton kernel: a `@triton.jit` kernel for the task is defined (so the source "is a
Triton candidate") but never launched; PyTorch does the work.

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: FORBIDDEN
EVAL_TIMEOUT_S: 120
DEFENCE: the op recorder records aten::add / aten::sigmoid on the task's data (strict: PyTorch
    compute), and no Triton launch was counted as a call of the candidate's own code
    (cuda_gym/eval/triton_support.py).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_sigmoid_kernel(x_ptr, bias_ptr, y_ptr, n, dim, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    z = (tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % dim, mask=mask)) * scale
    tl.store(y_ptr + offsets, 1.0 / (1.0 + tl.exp(-z)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid((x + self.bias) * self.scale)
