"""Single-head scaled dot-product self-attention with q/k/v/out linear projections (no mask)."""
import math

import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["attention", "softmax", "gemm", "transformer"],
    "sizes": {
        "cuda": {"batch_size": 16, "seq_len": 2048, "dim": 1024},
        "cpu": {"batch_size": 4, "seq_len": 256, "dim": 256},
    },
}

batch_size = 16
seq_len = 2048
dim = 1024


class Model(nn.Module):
    """out_proj(softmax(q k^T / sqrt(dim)) v) with q, k, v = q_proj(x), k_proj(x), v_proj(x)."""

    def __init__(self, dim):
        super().__init__()
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        # Variance-preserving weights: unit-variance q/k keep the attention far from uniform.
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.normal_(proj.weight, std=dim ** -0.5)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return self.out_proj(torch.matmul(torch.softmax(scores, dim=-1), v))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim]
