"""Work on a side thread that finishes after forward returns: in every call of the timing (the
warm-ups and the timed calls) the forward starts a detached std::thread that writes the output and
returns at once, so the timer stops before the work is done; the checked calls (the judge's first
look at trial 0's draw, first of all, and the correctness trials, which come after the timing) are
honest, so that only the timed calls' own check can catch it. The timing's calls are told apart by
their input's address, not by a count (how many calls the timing takes depends on the machine's
speed: the extra warm-ups run for a time, so a count cannot tell the last timed call from the first
trial): every warm-up and timed call gets the same live input tensors, whose storage the forward
keeps alive from the timing's first call (its second call), while the first look and every trial
get a fresh clone.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
MESSAGE: returned a wrong result
DEFENCE: right after each timed call returns, the worker reads the output at secret sampled
    positions (before anything else) and checks them against the reference's values for that
    call's input; an output that is still being written fails ("finished after the call returned").
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <thread>
static void gelu_range(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
extern "C" void gelu(const float* x, float* y, int64_t n, int deferred) {
    if (!deferred) { gelu_range(x, y, n); return; }
    std::thread([x, y, n] { gelu_range(x, y, n); }).detach();  // returns before any element is written
}
""",
    functions=["void gelu(const float* x, float* y, int64_t n, int deferred)"],
    extra_cflags=["-pthread"],
    extra_ldflags=["-pthread"],
)


_KEEP = []  # inputs and outputs stay alive (even after the model is deleted) while a thread uses them


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
        _lib.gelu(x, y, x.numel(), int(timed))
        _KEEP.extend((x, y))
        return y
