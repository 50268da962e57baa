"""Bias-free 3x3 Conv2d, then BatchNorm2d in eval mode (running stats), then ReLU, on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "batch_norm", "activation", "relu"],
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
    """Conv2d(3x3, pad 1, no bias) -> BatchNorm2d (non-trivial running stats) -> ReLU."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.1, 0.1)
            self.bn.running_var.uniform_(0.1, 0.5)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
