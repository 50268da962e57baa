"""Elementwise gelu(x + bias) + residual, with a per-column bias vector (exact erf GELU)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["elementwise", "broadcast", "activation", "gelu", "residual"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192},
        "cpu": {"batch_size": 1024, "dim": 4096},
    },
}

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """bias: nn.Parameter [dim]."""

    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)

    def forward(self, x, residual):
        return F.gelu(x + self.bias, approximate="none") + residual


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
