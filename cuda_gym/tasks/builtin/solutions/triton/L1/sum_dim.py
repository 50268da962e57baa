"""Sum over the last dimension: a tile of rows per program, column blocks accumulated in fp32 lanes,
then one tree reduction per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, rows, cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros((ROWS, BLOCK), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        col = start + tl.arange(0, BLOCK)
        mask = (row[:, None] < rows) & (col[None, :] < cols)
        acc += tl.load(x_ptr + row[:, None] * stride + col[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=1), mask=row < rows)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        cols = x.shape[-1]
        rows = x.numel() // cols
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        per_program, block = (1, 2048) if x.is_cuda else (64, 4096)
        row_sum_kernel[(triton.cdiv(rows, per_program),)](x, y, rows, cols, cols, ROWS=per_program, BLOCK=block,
                                                          num_warps=8)
        return y
