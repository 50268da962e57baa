"""3x3 Conv2d with bias, then GroupNorm, then tanh, on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "group_norm", "activation", "tanh"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 64, "out_channels": 64, "height": 128, "width": 128,
                 "num_groups": 8},
        "cpu": {"batch_size": 8, "in_channels": 32, "out_channels": 32, "height": 64, "width": 64,
                "num_groups": 8},
    },
}

batch_size = 32
in_channels = 64
out_channels = 64
height = 128
width = 128
num_groups = 8


class Model(nn.Module):
    """Conv2d(3x3, pad 1) -> GroupNorm(num_groups, out_channels) -> tanh."""

    def __init__(self, in_channels, out_channels, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.tanh(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, num_groups]
