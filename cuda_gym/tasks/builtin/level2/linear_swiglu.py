"""SwiGLU gate: one bias-free projection to 2*hidden features, split in halves a, b; out = silu(a) * b."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["gemm", "activation", "silu", "gated", "epilogue_fusion"],
    "sizes": {
        "cuda": {"batch_size": 4096, "in_features": 4096, "hidden": 4096},
        "cpu": {"batch_size": 512, "in_features": 1024, "hidden": 512},
    },
}

batch_size = 4096
in_features = 4096
hidden = 4096


class Model(nn.Module):
    """proj = nn.Linear(in_features, 2 * hidden, bias=False); a, b = proj(x).chunk(2, -1); silu(a) * b."""

    def __init__(self, in_features, hidden):
        super().__init__()
        self.proj = nn.Linear(in_features, 2 * hidden, bias=False)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return F.silu(a) * b


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, hidden]
