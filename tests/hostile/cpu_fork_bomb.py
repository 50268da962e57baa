"""Fork bomb (bounded): the first forward forks 200 children that sleep forever, then computes
honestly. Left alone, the children would outlive the evaluation and pile up across candidates.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: each worker is a session and process-group leader and is killed with its whole group
    (os.killpg SIGKILL) when its job ends; with root, the worker also runs its children in a
    private PID namespace whose init dies with the worker, which takes every descendant with it.
    The test checks that no process of the candidate survives.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <unistd.h>
extern "C" int spawn(int count) {
    int made = 0;
    for (int k = 0; k < count; ++k) {
        pid_t pid = fork();
        if (pid == 0) { for (;;) pause(); }
        if (pid > 0) ++made;
    }
    return made;
}
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["int spawn(int count)", "void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.spawned = False

    def forward(self, x):
        if not self.spawned:
            self.spawned = True
            _lib.spawn(200)
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
