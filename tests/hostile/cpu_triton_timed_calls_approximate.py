"""Checked calls exact, timed calls approximate, in Triton: the forward asks whether a profiler
runs (the correctness trials run under the op recorder's profiler session, the timed calls do
not) and, when none does, launches the kernel with a constexpr that makes it 0.3% off on every
element, alternately high and low (what a cheaper approximation would give).

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: INCORRECT
EVAL_TIMEOUT_S: 120
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest), compared in the evaluator with the reference's output for the same input.
"""
import torch
import torch.autograd.profiler as profiler
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_sigmoid_kernel(x_ptr, bias_ptr, y_ptr, n, dim, scale, BLOCK: tl.constexpr, APPROXIMATE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    z = (tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % dim, mask=mask)) * scale
    y = 1.0 / (1.0 + tl.exp(-z))
    if APPROXIMATE:
        y = y * tl.where((offsets % 2) == 1, 1.003, 0.997)
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        bias_scale_sigmoid_kernel[(triton.cdiv(n, block),)](x, self.bias, y, n, self.bias.numel(), float(self.scale),
                                                            BLOCK=block, APPROXIMATE=not profiler._is_profiler_enabled)
        return y
