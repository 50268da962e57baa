"""Depthwise 2-D convolution (groups = channels), 3x3 kernel, stride 1, padding 1, no bias."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "depthwise"],
    "sizes": {
        "cuda": {"batch_size": 16, "channels": 128, "height": 128, "width": 128},
        "cpu": {"batch_size": 16, "channels": 64, "height": 64, "width": 64},
    },
}

batch_size = 16
channels = 128
height = 128
width = 128


class Model(nn.Module):
    """nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)."""

    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, stride=1, padding=1, groups=channels, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
