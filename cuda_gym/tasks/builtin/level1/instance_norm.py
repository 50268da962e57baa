"""InstanceNorm2d (per-sample, per-channel normalization over H and W, no affine) on NCHW."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["normalization", "instance_norm", "reduction"],
    "sizes": {
        "cuda": {"batch_size": 32, "channels": 128, "height": 128, "width": 128},
        "cpu": {"batch_size": 8, "channels": 64, "height": 64, "width": 64},
    },
}

batch_size = 32
channels = 128
height = 128
width = 128


class Model(nn.Module):
    """nn.InstanceNorm2d(channels), eps=1e-5, affine=False."""

    def __init__(self, channels):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels, eps=1e-5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
