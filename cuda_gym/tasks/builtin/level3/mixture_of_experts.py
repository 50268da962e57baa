"""Dense (soft) mixture of 2 GELU-MLP experts: out = sum_e softmax(gate(x))_e * expert_e(x)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["moe", "mlp", "gemm", "gelu", "softmax", "gating"],
    "sizes": {
        "cuda": {"num_tokens": 8192, "dim": 2048, "hidden_dim": 4096, "num_experts": 2},
        "cpu": {"num_tokens": 256, "dim": 512, "hidden_dim": 1024, "num_experts": 2},
    },
}

num_tokens = 8192
dim = 2048
hidden_dim = 4096
num_experts = 2


class Model(nn.Module):
    """gate: Linear(dim, num_experts); each expert: Linear(dim, hidden_dim) -> GELU -> Linear(hidden_dim, dim)."""

    def __init__(self, dim, hidden_dim, num_experts):
        super().__init__()
        self.gate = nn.Linear(dim, num_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))
            for _ in range(num_experts)
        )

    def forward(self, x):
        weights = torch.softmax(self.gate(x), dim=-1)  # [tokens, num_experts]
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + weights[:, e : e + 1] * expert(x)
        return out


def get_inputs():
    return [torch.randn(num_tokens, dim)]


def get_init_inputs():
    return [dim, hidden_dim, num_experts]
