"""stdout/stderr flood: the forward prints 1 GB (Python print in 1 MB lines, then fwrite from the
kernel), to fill the disk or the evaluator's memory through an unbounded log.

TASK: builtin/L1/gelu
EXPECTED: RUNTIME_ERROR
DEFENCE: the worker's fd 1/2 go to a file under RLIMIT_FSIZE (`max_output_mb`, 64 MB): the write
    past the cap raises SIGXFSZ and ends the worker; the evaluator reads only the last
    `max_log_chars` of the log.
"""
import sys

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    static char line[1 << 20];
    std::memset(line, 'N', sizeof(line) - 1);
    for (int k = 0; k < 1024; ++k) { std::fwrite(line, 1, sizeof(line) - 1, stderr); }
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
)

_LINE = "P" * (1 << 20)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        for _ in range(1024):
            print(_LINE)
        sys.stdout.flush()
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
