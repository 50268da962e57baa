"""Tall-skinny matrix multiplication C = A @ B with a short reduction dimension (K << M)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["matmul", "gemm", "memory_bound"],
    "sizes": {
        "cuda": {"M": 32768, "N": 1024, "K": 128},
        "cpu": {"M": 8192, "N": 512, "K": 128},
    },
}

M = 32768
N = 1024
K = 128


class Model(nn.Module):
    """C = A @ B with A [M, K], B [K, N]."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
