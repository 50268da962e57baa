"""Post-norm transformer encoder layer: multi-head self-attention + GELU feed-forward, each with residual and LayerNorm."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["transformer", "attention", "multi_head", "layer_norm", "gelu", "gemm"],
    "sizes": {
        "cuda": {"batch_size": 16, "seq_len": 512, "dim": 1024, "num_heads": 16, "ff_dim": 4096},
        "cpu": {"batch_size": 2, "seq_len": 128, "dim": 256, "num_heads": 4, "ff_dim": 1024},
    },
}

batch_size = 16
seq_len = 512
dim = 1024
num_heads = 16
ff_dim = 4096


class Model(nn.Module):
    """x = norm1(x + attn(x)); x = norm2(x + fc2(gelu(fc1(x)))). Input [batch, seq, dim], no mask."""

    def __init__(self, dim, num_heads, ff_dim):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, ff_dim)
        self.fc2 = nn.Linear(ff_dim, dim)
        self.norm2 = nn.LayerNorm(dim)

    def attn(self, x):
        b, s, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each [b, h, s, d/h]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = self.norm1(x + self.attn(x))
        return self.norm2(x + self.fc2(F.gelu(self.fc1(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, num_heads, ff_dim]
