"""Checked calls exact, timed calls approximate, in Triton: the forward asks whether a profiler
runs (the correctness trials run under the op recorder's profiler session, the timed calls do
not) and, when none does, launches the kernel with a constexpr that makes it 0.3% off on every
element, alternately high and low (what a cheaper approximation would give).

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest), compared in the evaluator with the reference's output for the same input.
"""
import torch
import torch.autograd.profiler as profiler
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, APPROXIMATE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    if APPROXIMATE:
        y = y * tl.where((offsets % 2) == 1, 1.003, 0.997)
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        gelu_kernel[(triton.cdiv(n, block),)](x, y, n, APPROXIMATE=not profiler._is_profiler_enabled, BLOCK=block)
        return y
