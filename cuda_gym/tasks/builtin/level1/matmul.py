"""Square matrix multiplication C = A @ B with A [M, K] and B [K, N]."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["matmul", "gemm"],
    "sizes": {
        "cuda": {"M": 4096, "N": 4096, "K": 4096},
        "cpu": {"M": 768, "N": 768, "K": 768},
    },
}

M = 4096
N = 4096
K = 4096


class Model(nn.Module):
    """C = A @ B."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
