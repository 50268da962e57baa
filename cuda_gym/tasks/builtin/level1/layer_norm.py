"""LayerNorm over the last dimension of a 2-D tensor [batch, dim], with affine weight and bias."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["normalization", "layer_norm", "reduction"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192},
        "cpu": {"batch_size": 2048, "dim": 4096},
    },
}

batch_size = 8192
dim = 8192


class Model(nn.Module):
    """nn.LayerNorm(dim) with non-trivial affine parameters."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
