"""Pre-norm GPT decoder block: causal multi-head self-attention + 4x GELU MLP, each with a residual."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CUDA_GYM = {
    "tags": ["transformer", "attention", "causal", "multi_head", "layer_norm", "gelu", "gemm"],
    "sizes": {
        "cuda": {"batch_size": 8, "seq_len": 1024, "dim": 1024, "num_heads": 16},
        "cpu": {"batch_size": 2, "seq_len": 128, "dim": 256, "num_heads": 4},
    },
}

batch_size = 8
seq_len = 1024
dim = 1024
num_heads = 16


class Model(nn.Module):
    """x = x + attn(ln1(x)) with a causal mask; x = x + fc2(gelu(fc1(ln2(x)))). Input [batch, seq, dim]."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out_proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    def attn(self, x):
        b, s, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).view(b, s, 3, h, d // h).permute(2, 0, 3, 1, 4)  # each [b, h, s, d/h]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d // h)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        return self.out_proj(out.transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, num_heads]
