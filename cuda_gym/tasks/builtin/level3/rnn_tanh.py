"""Single-layer tanh RNN (nn.RNN, batch_first) over a short sequence; returns the output sequence."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["rnn", "recurrent", "tanh", "gemm"],
    "sizes": {
        "cuda": {"batch_size": 256, "seq_len": 16, "input_size": 1024, "hidden_size": 1024},
        "cpu": {"batch_size": 128, "seq_len": 16, "input_size": 256, "hidden_size": 256},
    },
}

batch_size = 256
seq_len = 16
input_size = 1024
hidden_size = 1024


class Model(nn.Module):
    """nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", batch_first=True), h0 = 0."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden_size, num_layers=1, nonlinearity="tanh", batch_first=True)

    def forward(self, x):
        output, _ = self.rnn(x)
        return output


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
