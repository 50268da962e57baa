"""Linear layer with bias followed by exact (erf) GELU: gelu(x @ W^T + b)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["gemm", "activation", "gelu", "epilogue_fusion"],
    "sizes": {
        "cuda": {"batch_size": 4096, "in_features": 4096, "out_features": 4096},
        "cpu": {"batch_size": 512, "in_features": 1024, "out_features": 1024},
    },
}

batch_size = 4096
in_features = 4096
out_features = 4096


class Model(nn.Module):
    """nn.Linear(in_features, out_features) -> exact GELU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x), approximate="none")


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
