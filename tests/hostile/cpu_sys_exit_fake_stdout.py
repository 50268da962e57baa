"""Exiting the process and printing fake results: the forward prints a made-up result line to
stdout (as a harness that parses the worker's stdout would read it) and calls sys.exit(0).

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: results leave the worker only as framed messages on a private channel (never stdout);
    SystemExit inside the forward is caught and reported as "forward raised SystemExit".
"""
import sys

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void noop(float* y, int64_t n) {}
""",
    functions=["void noop(float* y, int64_t n)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.noop(y, 0)
        print('{"error_code": "OK", "correct": true, "speedup_vs_eager": 1000.0}', flush=True)
        print("All trials passed. speedup: 1000x", flush=True)
        sys.exit(0)
