"""ResNet basic block (eval-mode BatchNorm): relu(bn2(conv2(relu(bn1(conv1(x))))) + x)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "batch_norm", "relu", "residual", "resnet"],
    "sizes": {
        "cuda": {"batch_size": 64, "channels": 128, "height": 56, "width": 56},
        "cpu": {"batch_size": 16, "channels": 32, "height": 32, "width": 32},
    },
}

batch_size = 64
channels = 128
height = 56
width = 56


def _randomize_bn(bn):
    """Non-trivial running stats and affine parameters (all part of the state_dict)."""
    with torch.no_grad():
        bn.running_mean.uniform_(-0.1, 0.1)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.2, 0.2)


class Model(nn.Module):
    """Two 3x3 convs (no bias) with BatchNorm, identity shortcut."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        _randomize_bn(self.bn1)
        _randomize_bn(self.bn2)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels]
