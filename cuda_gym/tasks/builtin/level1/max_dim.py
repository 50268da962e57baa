"""Maximum over the middle dimension of a 3-D tensor: [batch, dim1, dim2] -> [batch, dim2]."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["reduction", "max", "strided"],
    "sizes": {
        "cuda": {"batch_size": 128, "dim1": 1024, "dim2": 1024},
        "cpu": {"batch_size": 128, "dim1": 256, "dim2": 1024},
    },
}

batch_size = 128
dim1 = 1024
dim2 = 1024


class Model(nn.Module):
    """torch.amax(x, dim=1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return []
