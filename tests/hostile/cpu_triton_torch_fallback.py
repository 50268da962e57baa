"""A torch fallback beside a real Triton launch: the kernel runs on small dummy tensors (so a
launch is counted) inside a try/except that would also hide a failing launch, and the output is
computed by PyTorch.

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: FORBIDDEN
EVAL_TIMEOUT_S: 120
DEFENCE: the op recorder records PyTorch compute on the forward input; under the strict policy that
    is FORBIDDEN whatever the candidate's own kernels did.
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
        self.a = torch.zeros(16)
        self.b = torch.zeros(16)

    def forward(self, x):
        try:
            bias_scale_sigmoid_kernel[(1,)](self.a, self.a, self.b, 16, 16, 1.0, BLOCK=16)
        except Exception:  # noqa: BLE001 - the fallback would hide a failing launch too
            pass
        return torch.sigmoid((x + self.bias) * self.scale)
