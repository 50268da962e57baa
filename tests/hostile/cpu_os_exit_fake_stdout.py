"""Exiting the process: prints a fake verdict to stdout and stderr and calls os._exit(0) from
inside the forward (no exception, no cleanup, exit status 0 like a worker that finished).

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: the evaluator needs the worker's own messages for every stage; a worker that stops
    without them ("the worker died during the correctness trials") gets RUNTIME_ERROR whatever
    its exit status or output.
"""
import os
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
        sys.stdout.write('{"error_code": "OK", "speedup_vs_eager": 1000.0}\n')
        sys.stderr.write("RESULT: PASS\n")
        sys.stdout.flush()
        os._exit(0)
