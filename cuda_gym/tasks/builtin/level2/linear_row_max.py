"""Linear layer with bias followed by the maximum over output features: [batch, in] -> [batch]."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["gemm", "reduction", "max"],
    "sizes": {
        "cuda": {"batch_size": 8192, "in_features": 4096, "out_features": 4096},
        "cpu": {"batch_size": 512, "in_features": 1024, "out_features": 1024},
    },
}

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    """nn.Linear(in_features, out_features) -> amax(dim=-1)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.amax(self.linear(x), dim=-1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
