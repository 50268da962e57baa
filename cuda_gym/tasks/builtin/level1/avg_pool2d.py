"""2-D average pooling, 3x3 window, stride 1, padding 1 (zero padding counted), on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["pooling", "avg_pool", "stencil"],
    "sizes": {
        "cuda": {"batch_size": 16, "channels": 64, "height": 256, "width": 256},
        "cpu": {"batch_size": 4, "channels": 16, "height": 128, "width": 128},
    },
}

batch_size = 16
channels = 64
height = 256
width = 256


class Model(nn.Module):
    """nn.AvgPool2d(kernel_size=3, stride=1, padding=1), count_include_pad=True."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return []
