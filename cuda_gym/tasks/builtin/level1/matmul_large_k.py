"""Matrix multiplication C = A @ B with a long reduction dimension (K >> M, N)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["matmul", "gemm", "split_k"],
    "sizes": {
        "cuda": {"M": 1024, "N": 1024, "K": 32768},
        "cpu": {"M": 256, "N": 256, "K": 8192},
    },
}

M = 1024
N = 1024
K = 32768


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
