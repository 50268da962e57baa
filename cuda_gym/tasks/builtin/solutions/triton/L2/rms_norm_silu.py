"""silu(x / sqrt(mean(x^2) + eps) * weight), one pass over rows held in registers."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_norm_silu_kernel(x_ptr, w_ptr, y_ptr, rows, cols, stride, eps, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    col = tl.arange(0, BLOCK)[None, :]
    mask = (row < rows) & (col < cols)
    x = tl.load(x_ptr + row * stride + col, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=1) / cols + eps)[:, None]
    w = tl.load(w_ptr + col, mask=col < cols, other=0.0)
    v = x / rms * w
    tl.store(y_ptr + row * stride + col, v / (1.0 + tl.exp(-v)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty_like(x)
        block = triton.next_power_of_2(cols)
        per_program = 1 if x.is_cuda else 16
        rms_norm_silu_kernel[(triton.cdiv(rows, per_program),)](x, self.weight, y, rows, cols, cols, float(self.eps),
                                                                ROWS=per_program, BLOCK=block, num_warps=8)
        return y
