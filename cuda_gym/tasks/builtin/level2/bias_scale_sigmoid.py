"""Elementwise sigmoid((x + bias) * scale) with a per-column bias vector broadcast over rows."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["elementwise", "broadcast", "activation", "sigmoid"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192, "scale": 0.5},
        "cpu": {"batch_size": 1024, "dim": 4096, "scale": 0.5},
    },
}

batch_size = 8192
dim = 8192
scale = 0.5


class Model(nn.Module):
    """bias: nn.Parameter [dim]; scale: python float."""

    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid((x + self.bias) * self.scale)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, scale]
