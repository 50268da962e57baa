"""ELU applied elementwise: x if x > 0 else alpha * (exp(x) - 1), alpha=1."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["elementwise", "activation", "elu"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192},
        "cpu": {"batch_size": 1024, "dim": 4096},
    },
}

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """F.elu(x, alpha=1.0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.elu(x, alpha=1.0)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
