"""Two-layer LSTM (nn.LSTM, batch_first) over a sequence; returns the top layer's output sequence."""
import torch
import torch.nn as nn

CUDA_GYM = {
    "tags": ["rnn", "lstm", "recurrent", "gemm"],
    "sizes": {
        "cuda": {"batch_size": 128, "seq_len": 64, "input_size": 512, "hidden_size": 1024},
        "cpu": {"batch_size": 16, "seq_len": 32, "input_size": 256, "hidden_size": 256},
    },
}

batch_size = 128
seq_len = 64
input_size = 512
hidden_size = 1024


class Model(nn.Module):
    """nn.LSTM(input_size, hidden_size, num_layers=2, batch_first=True) with zero initial state."""

    def __init__(self, input_size, hidden_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=2, batch_first=True)
        for w in self.lstm.parameters():  # 3x PyTorch's default range so the top layer's output is O(0.1)
            nn.init.uniform_(w, -3 * hidden_size ** -0.5, 3 * hidden_size ** -0.5)

    def forward(self, x):
        output, _ = self.lstm(x)
        return output


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size]
