"""Pre-norm transformer feed-forward block: x + Linear2(GELU(Linear1(LayerNorm(x)))) on [tokens, dim]."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["transformer", "mlp", "layer_norm", "gelu", "gemm", "residual"],
    "sizes": {
        "cuda": {"num_tokens": 8192, "dim": 2048, "hidden_dim": 8192},
        "cpu": {"num_tokens": 256, "dim": 512, "hidden_dim": 2048},
    },
}

num_tokens = 8192
dim = 2048
hidden_dim = 8192


class Model(nn.Module):
    """LayerNorm(dim) -> Linear(dim, hidden_dim) -> exact GELU -> Linear(hidden_dim, dim), plus x."""

    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def get_inputs():
    return [torch.randn(num_tokens, dim)]


def get_init_inputs():
    return [dim, hidden_dim]
