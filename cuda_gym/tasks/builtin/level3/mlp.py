"""Three-layer MLP: Linear -> ReLU -> Linear -> ReLU -> Linear."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["mlp", "gemm", "relu"],
    "sizes": {
        "cuda": {"batch_size": 4096, "input_size": 4096, "hidden_size": 4096, "output_size": 1024},
        "cpu": {"batch_size": 256, "input_size": 1024, "hidden_size": 1024, "output_size": 256},
    },
}

batch_size = 4096
input_size = 4096
hidden_size = 4096
output_size = 1024


class Model(nn.Module):
    """input_size -> hidden_size -> hidden_size -> output_size, ReLU between layers."""

    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, output_size),
        )

    def forward(self, x):
        return self.net(x)


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, output_size]
