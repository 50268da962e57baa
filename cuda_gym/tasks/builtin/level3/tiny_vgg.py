"""Tiny VGG-style classifier: two [conv3x3-ReLU-conv3x3-ReLU-maxpool2] stages, then a linear head."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["conv", "conv2d", "relu", "pooling", "gemm", "vgg"],
    "sizes": {
        "cuda": {"batch_size": 256, "in_channels": 3, "image_size": 64, "num_classes": 100},
        "cpu": {"batch_size": 8, "in_channels": 3, "image_size": 32, "num_classes": 100},
    },
}

batch_size = 256
in_channels = 3
image_size = 64
num_classes = 100


def _stage(cin, cout):
    return [
        nn.Conv2d(cin, cout, kernel_size=3, padding=1), nn.ReLU(),
        nn.Conv2d(cout, cout, kernel_size=3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
    ]


class Model(nn.Module):
    """in_channels -> 32 -> 64 channels, spatial size / 4, then Linear(64 * (image_size // 4) ** 2, num_classes)."""

    def __init__(self, in_channels, image_size, num_classes):
        super().__init__()
        self.features = nn.Sequential(*_stage(in_channels, 32), *_stage(32, 64))
        self.classifier = nn.Linear(64 * (image_size // 4) ** 2, num_classes)
        for m in self.features:
            if isinstance(m, nn.Conv2d):  # keep activations O(1) through the ReLU stack
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def get_inputs():
    return [torch.randn(batch_size, in_channels, image_size, image_size)]


def get_init_inputs():
    return [in_channels, image_size, num_classes]
