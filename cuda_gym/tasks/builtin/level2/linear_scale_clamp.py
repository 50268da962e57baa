"""Linear layer with bias, multiplied by a scalar, then clamped: clamp((x @ W^T + b) * scale, lo, hi)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["gemm", "elementwise", "clamp", "epilogue_fusion"],
    "sizes": {
        "cuda": {"batch_size": 4096, "in_features": 4096, "out_features": 4096,
                 "scale": 2.0, "clamp_min": -1.0, "clamp_max": 1.0},
        "cpu": {"batch_size": 512, "in_features": 1024, "out_features": 1024,
                "scale": 2.0, "clamp_min": -1.0, "clamp_max": 1.0},
    },
}

batch_size = 4096
in_features = 4096
out_features = 4096
scale = 2.0
clamp_min = -1.0
clamp_max = 1.0


class Model(nn.Module):
    """nn.Linear -> * scale -> clamp(clamp_min, clamp_max)."""

    def __init__(self, in_features, out_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        return torch.clamp(self.linear(x) * self.scale, self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale, clamp_min, clamp_max]
