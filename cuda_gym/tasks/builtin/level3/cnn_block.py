"""CNN block: 3x3 Conv2d (padding 1) with bias -> ReLU -> MaxPool2d(2), on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "relu", "pooling", "max_pool"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 64, "out_channels": 128, "height": 128, "width": 128},
        "cpu": {"batch_size": 8, "in_channels": 32, "out_channels": 32, "height": 64, "width": 64},
    },
}

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128


class Model(nn.Module):
    """Conv2d(in_channels, out_channels, 3, padding=1) -> ReLU -> MaxPool2d(2)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return self.pool(self.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
