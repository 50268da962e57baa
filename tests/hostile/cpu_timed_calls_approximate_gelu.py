"""Checked calls exact, timed calls approximate: in every call of the timing (the warm-ups and
the timed calls) the forward returns a GELU that is 0.3% off on every element, alternately high and
low (60 times the fp32 policy's relative-norm tolerance), which a faster approximate kernel could
give; the checked calls (the judge's first look at trial 0's draw, the first call, and the
correctness trials, after the timing) get the exact GELU. The sum and L1 norm of each timed output
move by far less than 5e-4 of the L1 norm. The timing's calls are told apart by their input's
address: every warm-up and timed call gets the same live input tensors, whose storage the forward
keeps alive from the timing's first call (its second call), while the first look and every trial
get a fresh clone. Same native kernel in every call, so the op recorder's audits see nothing.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
MESSAGE: sampled elements out of tolerance
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest: every element at secret positions within the elementwise bound, a sketch of
    the relative-norm error over every element, exact norms and sums), compared in the evaluator
    with the reference's output for the same input; a 0.3% error on every element fails the
    secret samples first.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void gelu(const float* x, float* y, int64_t n, int64_t approximate) {
    for (int64_t i = 0; i < n; ++i) {
        float v = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        y[i] = approximate ? v * ((i & 1) ? 1.003f : 0.997f) : v;
    }
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n, int64_t approximate)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.timing_input = None

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # the timing's first call: the timer's live input, kept (no clone can take its address)
            self.timing_input = x
        timed = self.timing_input is not None and x.data_ptr() == self.timing_input.data_ptr()
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel(), 1 if timed else 0)
        return y
