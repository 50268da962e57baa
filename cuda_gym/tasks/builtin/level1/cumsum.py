"""Inclusive prefix sum (scan) over the last dimension of a 2-D tensor."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["scan", "cumsum"],
    "sizes": {
        "cuda": {"batch_size": 4096, "dim": 16384},
        "cpu": {"batch_size": 2048, "dim": 4096},
    },
}

batch_size = 4096
dim = 16384


class Model(nn.Module):
    """torch.cumsum(x, dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
