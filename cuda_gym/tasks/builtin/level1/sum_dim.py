"""Sum over the last dimension of a 2-D tensor (keepdim=False): [batch, dim] -> [batch]."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["reduction", "sum"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 16384},
        "cpu": {"batch_size": 8192, "dim": 4096},
    },
}

batch_size = 8192
dim = 16384


class Model(nn.Module):
    """x.sum(dim=-1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
