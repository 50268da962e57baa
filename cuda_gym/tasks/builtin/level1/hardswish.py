"""Hardswish x * relu6(x + 3) / 6 applied elementwise."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["elementwise", "activation", "hardswish"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192},
        "cpu": {"batch_size": 2048, "dim": 4096},
    },
}

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """F.hardswish(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.hardswish(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
