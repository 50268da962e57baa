"""GroupNorm over an NCHW tensor, with affine weight and bias."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["normalization", "group_norm", "reduction"],
    "sizes": {
        "cuda": {"batch_size": 32, "channels": 128, "height": 128, "width": 128, "num_groups": 8},
        "cpu": {"batch_size": 16, "channels": 32, "height": 128, "width": 128, "num_groups": 8},
    },
}

batch_size = 32
channels = 128
height = 128
width = 128
num_groups = 8


class Model(nn.Module):
    """nn.GroupNorm(num_groups, channels) with non-trivial affine parameters."""

    def __init__(self, num_groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(num_groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [num_groups, channels]
