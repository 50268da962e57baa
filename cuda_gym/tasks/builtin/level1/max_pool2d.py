"""2-D max pooling, 3x3 window, stride 2, padding 1, on an NCHW tensor."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["pooling", "max_pool"],
    "sizes": {
        "cuda": {"batch_size": 16, "channels": 64, "height": 256, "width": 256},
        "cpu": {"batch_size": 4, "channels": 32, "height": 128, "width": 128},
    },
}

batch_size = 16
channels = 64
height = 256
width = 256


class Model(nn.Module):
    """nn.MaxPool2d(kernel_size=3, stride=2, padding=1)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
