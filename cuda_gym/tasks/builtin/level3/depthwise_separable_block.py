"""MobileNet depthwise-separable block: 3x3 depthwise conv -> BN -> ReLU -> 1x1 pointwise conv -> BN -> ReLU."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "depthwise", "pointwise", "batch_norm", "relu", "mobilenet"],
    "sizes": {
        "cuda": {"batch_size": 32, "in_channels": 128, "out_channels": 256, "height": 64, "width": 64},
        "cpu": {"batch_size": 24, "in_channels": 32, "out_channels": 64, "height": 32, "width": 32},
    },
}

batch_size = 32
in_channels = 128
out_channels = 256
height = 64
width = 64


def _randomize_bn(bn):
    """Non-trivial running stats and affine parameters (all part of the state_dict)."""
    with torch.no_grad():
        bn.running_mean.uniform_(-0.1, 0.1)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)


class Model(nn.Module):
    """Convs have no bias; BatchNorm is in eval mode (running stats)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.depthwise = nn.Conv2d(in_channels, in_channels, kernel_size=3, padding=1, groups=in_channels, bias=False)
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.pointwise = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        _randomize_bn(self.bn1)
        _randomize_bn(self.bn2)

    def forward(self, x):
        x = torch.relu(self.bn1(self.depthwise(x)))
        return torch.relu(self.bn2(self.pointwise(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
