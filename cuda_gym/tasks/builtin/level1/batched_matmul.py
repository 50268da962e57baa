"""Batched matrix multiplication C[b] = A[b] @ B[b] for 3-D tensors."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["matmul", "bmm", "gemm"],
    "sizes": {
        "cuda": {"batch_size": 128, "M": 512, "N": 512, "K": 1024},
        "cpu": {"batch_size": 32, "M": 256, "N": 256, "K": 256},
    },
}

batch_size = 128
M = 512
N = 512
K = 1024


class Model(nn.Module):
    """torch.bmm(A, B) with A [batch, M, K], B [batch, K, N]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(batch_size, M, K), torch.randn(batch_size, K, N)]


def get_init_inputs():
    return []
