"""sigmoid((x + bias) * scale) in one Triton elementwise kernel (the bias broadcast over rows)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_scale_sigmoid_kernel(x_ptr, bias_ptr, y_ptr, n, dim, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + offsets % dim, mask=mask)
    z = (x + bias) * scale
    tl.store(y_ptr + offsets, 1.0 / (1.0 + tl.exp(-z)), mask=mask)


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
                                                            BLOCK=block)
        return y
