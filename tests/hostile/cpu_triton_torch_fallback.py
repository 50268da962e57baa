"""A torch fallback beside a real Triton launch: the kernel runs on a small dummy tensor (so a
launch is counted) and the output is computed by torch.nn.functional.gelu, inside a try/except
that would also catch a failing launch.

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: the op recorder records aten::gelu on the forward input; under the strict policy that is
    FORBIDDEN whatever the candidate's own kernels did.
"""
import torch
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
    def __init__(self):
        super().__init__()
        self.a = torch.zeros(16)
        self.b = torch.zeros(16)

    def forward(self, x):
        try:
            gelu_kernel[(1,)](self.a, self.b, 16, BLOCK=16)
        except Exception:  # noqa: BLE001 - the fallback would hide a failing launch too
            pass
        return F.gelu(x)
