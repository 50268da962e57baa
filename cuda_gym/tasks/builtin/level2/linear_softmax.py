"""Linear layer with bias followed by softmax over the output features."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["gemm", "softmax", "reduction"],
    "sizes": {
        "cuda": {"batch_size": 8192, "in_features": 2048, "out_features": 2048},
        "cpu": {"batch_size": 1024, "in_features": 512, "out_features": 512},
    },
}

batch_size = 8192
in_features = 2048
out_features = 2048


class Model(nn.Module):
    """softmax(nn.Linear(in_features, out_features)(x), dim=-1)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.softmax(self.linear(x), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
