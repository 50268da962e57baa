"""3x3 Conv2d with bias, then 2x2 max pooling (stride 2), then hardswish, on NCHW."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["conv", "conv2d", "pooling", "max_pool", "activation", "hardswish"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 64, "out_channels": 128, "height": 128, "width": 128},
        "cpu": {"batch_size": 4, "in_channels": 32, "out_channels": 32, "height": 64, "width": 64},
    },
}

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128


class Model(nn.Module):
    """Conv2d(3x3, pad 1) -> MaxPool2d(2) -> hardswish."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return F.hardswish(self.pool(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
