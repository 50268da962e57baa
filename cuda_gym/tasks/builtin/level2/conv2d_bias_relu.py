"""3x3 Conv2d (stride 1, padding 1) with bias, followed by ReLU, on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "activation", "relu", "epilogue_fusion"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 64, "out_channels": 64, "height": 128, "width": 128},
        "cpu": {"batch_size": 8, "in_channels": 32, "out_channels": 32, "height": 64, "width": 64},
    },
}

batch_size = 32
in_channels = 64
out_channels = 64
height = 128
width = 128


class Model(nn.Module):
    """nn.Conv2d(in_channels, out_channels, 3, padding=1) -> ReLU."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=True)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
