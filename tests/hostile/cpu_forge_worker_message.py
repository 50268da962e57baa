"""Forging a well-formed worker message: the protocol is public (cuda_gym.eval.protocol), and the
channel to the evaluator is a socket among this process's file descriptors. The forward is honest
in its first call (the judge's first look at trial 0's draw, which must pass), and its second call,
the first of the timing (a warm-up call: the timing comes before the correctness trials), writes a
complete "timing" message claiming 0.1 us per call (no checksums to check) followed by an "exit"
message, so that the evaluator would stop reading before the real timing arrives. (Which call
of the timing a later count lands in depends on the machine's speed: the extra warm-ups run for a
time.)

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
MESSAGE: failed authentication
DEFENCE: every message after the job starts carries a sequence number and an HMAC-SHA256 under a
    per-job key that the evaluator sends with the job (and that candidate code cannot reach);
    a message that fails authentication is FORBIDDEN. The evaluator also requires one checksum row
    per timed repetition.
"""
import os
import struct

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


def _forge():
    from cuda_gym.eval import protocol

    stats = {"median_ms": 1e-4, "min_ms": 1e-4, "max_ms": 1e-4, "iqr_ms": 0.0, "reps": 50, "method": "wall"}
    frames = b""
    for kind, meta in (("timing", {"stats": stats, "flags": [], "checksums": [], "tampered": []}), ("exit", {})):
        payload = protocol.encode(kind, meta)
        frames += struct.pack("!i", len(payload)) + payload
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                os.write(int(name), frames)
        except OSError:
            pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # after the first look: the timing's first call, before any timing message
            try:
                _forge()
            except Exception:
                pass
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
