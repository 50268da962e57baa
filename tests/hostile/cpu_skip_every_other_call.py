"""Skipping work on some calls: in the timing (the warm-ups and the timed calls) the kernel runs
only on every other call, and the skipped calls return the previous output tensor; the checked
calls (the judge's first look at trial 0's draw, first of all, and the correctness trials, which
come after the timing) are honest, since a trial would see a stale output. The timing's calls are
told apart by their input's address, not by a count (how many calls the timing takes depends on
the machine's speed: the extra warm-ups run for a time, so a count cannot tell the last timed call
from the first trial): every warm-up and timed call gets the same live input tensors, whose
storage the forward keeps alive from the timing's first call (its second call), while the first
look and every trial get a fresh clone. The timed calls come one after another and every one is
checksummed (three at least in the tests' config), so one of them at least is skipped, whichever
call of the timing the first timed call is.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
MESSAGE: returned a wrong result
DEFENCE: every timed call is checksummed against the reference for its own input (a fresh draw of
    the task's inputs: a stale output is another draw's GELU), and the checksum includes
    position-sensitive sums at secret sampled positions, so a stale (or permuted) output fails
    even where its plain sums would agree.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.timing_input = None
        self.last = None

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # the timing's first call: the timer's live input, kept (no clone can take its address)
            self.timing_input = x
        timed = self.timing_input is not None and x.data_ptr() == self.timing_input.data_ptr()
        if timed and self.calls % 2 == 1 and self.last is not None:  # every other call of the timing
            return self.last
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        self.last = y
        return y
