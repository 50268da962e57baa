"""ResNet bottleneck block (eval-mode BatchNorm): 1x1 reduce -> 3x3 -> 1x1 expand, identity shortcut."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "batch_norm", "relu", "residual", "resnet"],
    "sizes": {
        "cuda": {"batch_size": 32, "channels": 256, "mid_channels": 64, "height": 56, "width": 56},
        "cpu": {"batch_size": 8, "channels": 128, "mid_channels": 32, "height": 28, "width": 28},
    },
}

batch_size = 32
channels = 256
mid_channels = 64
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
    """relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + x); convs have no bias."""

    def __init__(self, channels, mid_channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, mid_channels, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid_channels)
        self.conv2 = nn.Conv2d(mid_channels, mid_channels, kernel_size=3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid_channels)
        self.conv3 = nn.Conv2d(mid_channels, channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)
        for bn in (self.bn1, self.bn2, self.bn3):
            _randomize_bn(bn)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, mid_channels]
