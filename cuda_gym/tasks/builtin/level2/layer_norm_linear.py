"""LayerNorm over the last dimension followed by a linear layer with bias (pre-norm projection)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["normalization", "layer_norm", "gemm", "prologue_fusion"],
    "sizes": {
        "cuda": {"batch_size": 8192, "in_features": 4096, "out_features": 2048},
        "cpu": {"batch_size": 512, "in_features": 1024, "out_features": 1024},
    },
}

batch_size = 8192
in_features = 4096
out_features = 2048


class Model(nn.Module):
    """nn.LayerNorm(in_features) -> nn.Linear(in_features, out_features)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(in_features)
        self.linear = nn.Linear(in_features, out_features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.linear(self.norm(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
