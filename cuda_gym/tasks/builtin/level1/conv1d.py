"""1-D convolution, kernel 5, stride 1, padding 2, no bias, on an [N, C, L] tensor."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv1d"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 128, "out_channels": 128, "length": 8192},
        "cpu": {"batch_size": 8, "in_channels": 64, "out_channels": 64, "length": 2048},
    },
}

batch_size = 32
in_channels = 128
out_channels = 128
length = 8192


class Model(nn.Module):
    """nn.Conv1d(in_channels, out_channels, 5, padding=2, bias=False)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size=5, stride=1, padding=2, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(batch_size, in_channels, length)]


def get_init_inputs():
    return [in_channels, out_channels]
