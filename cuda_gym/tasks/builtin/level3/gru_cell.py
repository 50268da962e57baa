"""One GRU cell step (nn.GRUCell): h_next = GRUCell(x, h)."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["rnn", "gru", "gemm", "gated"],
    "sizes": {
        "cuda": {"batch_size": 4096, "input_size": 2048, "hidden_size": 2048},
        "cpu": {"batch_size": 256, "input_size": 512, "hidden_size": 512},
    },
}

batch_size = 4096
input_size = 2048
hidden_size = 2048


class Model(nn.Module):
    """nn.GRUCell(input_size, hidden_size); x [batch, input_size], h [batch, hidden_size]."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.cell = nn.GRUCell(input_size, hidden_size)

    def forward(self, x, h):
        return self.cell(x, h)


def get_inputs():
    return [torch.randn(batch_size, input_size), torch.randn(batch_size, hidden_size)]


def get_init_inputs():
    return [input_size, hidden_size]
