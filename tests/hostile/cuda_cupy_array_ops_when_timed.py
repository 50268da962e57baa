"""Checked-vs-timed switching in CuPy form: every call of the timing (the warm-ups and the timed
calls, which come before the correctness trials) computes with CuPy's array routines and launches
nothing of the candidate's own; every other call (the judge's first look at trial 0's draw, first
of all, the paired calls, the trials and the profiled forward) launches its RawKernel. The
timing's calls are told apart by their input's address: every warm-up and timed call gets the
timer's live input tensors, whose storage the forward keeps alive from the timing's first call
(its second call); the others get fresh clones or the pairing's own tensors. (No count of calls
covers the timed calls on every machine: the extra warm-ups run for a time, up to 200 calls.)

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
MESSAGE: timed calls behaved differently from the correctness trials
DEFENCE: the timer's warm-up calls and a secret share of the timed calls are audited like a trial:
    an audited call that made no call of the candidate's native code (no counted RawKernel launch)
    fails the audit under the strict policy (cuda_gym/eval/cupy_support.py counts the launches).
"""
import math

import cupy
import cupyx.scipy.special
import numpy as np
import torch
import torch.nn as nn

_gelu = cupy.RawKernel(r"""
extern "C" __global__ void gelu_kernel(const float* x, float* y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
""", "gelu_kernel")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.timing_input = None

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # the timing's first call: the timer's live input, kept (no clone can take its address)
            self.timing_input = x
        y = torch.empty_like(x)
        if self.timing_input is None or x.data_ptr() != self.timing_input.data_ptr():
            _gelu((1024,), (256,), (cupy.asarray(x), cupy.asarray(y), np.int64(x.numel())))
            return y
        xs, ys = cupy.asarray(x), cupy.asarray(y)
        cupy.multiply(0.5 * xs, 1.0 + cupyx.scipy.special.erf(xs * (1.0 / math.sqrt(2.0))), out=ys)
        return y
