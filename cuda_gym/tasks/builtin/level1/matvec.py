"""Matrix-vector product y = A @ x with A [M, K] and x [K]."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["matmul", "gemv", "memory_bound"],
    "sizes": {
        "cuda": {"M": 8192, "K": 16384},
        "cpu": {"M": 4096, "K": 8192},
    },
}

M = 8192
K = 16384


class Model(nn.Module):
    """torch.mv(A, x)."""

    def __init__(self):
        super().__init__()

    def forward(self, a, x):
        return torch.mv(a, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K)]


def get_init_inputs():
    return []
