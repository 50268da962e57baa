"""Scaled dot-product attention over (batch, heads, seq, head_dim) tensors, no mask: the reference
for the strict-policy candidates beside it (the shape of KernelBench's few-shot flash-attention example)."""
import math

import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["attention", "softmax", "test"],
    "sizes": {
        "cuda": {"batch_size": 8, "heads": 16, "seq_len": 512, "head_dim": 64},
        "cpu": {"batch_size": 2, "heads": 4, "seq_len": 64, "head_dim": 32},
    },
}

batch_size = 8
heads = 16
seq_len = 512
head_dim = 64


class Model(nn.Module):
    """softmax(q k^T / sqrt(head_dim)) v."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    shape = (batch_size, heads, seq_len, head_dim)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
