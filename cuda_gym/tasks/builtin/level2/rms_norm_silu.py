"""RMSNorm over the last dimension followed by SiLU: silu(x / sqrt(mean(x^2) + eps) * weight)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["normalization", "rms_norm", "activation", "silu", "reduction"],
    "sizes": {
        "cuda": {"batch_size": 8192, "dim": 8192, "eps": 1e-6},
        "cpu": {"batch_size": 1024, "dim": 4096, "eps": 1e-6},
    },
}

batch_size = 8192
dim = 8192
eps = 1e-6


class Model(nn.Module):
    """weight: nn.Parameter [dim]; eps: python float."""

    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return F.silu(x / rms * self.weight)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]
