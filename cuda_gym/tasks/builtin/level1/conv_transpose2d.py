"""Transposed 2-D convolution, 4x4 kernel, stride 2, padding 1 (2x upsampling), no bias."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv_transpose2d", "upsample"],
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
    """nn.ConvTranspose2d(in_channels, out_channels, 4, stride=2, padding=1, bias=False)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size=4, stride=2, padding=1, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
