"""Transposed Conv2d (4x4 kernel, stride 2, padding 1) with bias, followed by tanh, on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv_transpose2d", "upsample", "activation", "tanh"],
    "sizes": {
        "cuda": {"batch_size": 16, "in_channels": 64, "out_channels": 32, "height": 128, "width": 128},
        "cpu": {"batch_size": 8, "in_channels": 32, "out_channels": 16, "height": 64, "width": 64},
    },
}

batch_size = 16
in_channels = 64
out_channels = 32
height = 128
width = 128


class Model(nn.Module):
    """nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1) -> tanh."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=4, stride=2, padding=1)

    def forward(self, x):
        return torch.tanh(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
