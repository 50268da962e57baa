"""Fork bomb that escapes the process group: 50 children call setsid() (new session, new process
group) and sleep forever, so killing the worker's process group does not reach them.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: with root (CAP_SYS_ADMIN), sandbox.contain_children() puts the worker's children in a
    private PID namespace whose init process dies with the worker (PR_SET_PDEATHSIG); the kernel
    then kills every process in the namespace, setsid or not. Without that privilege the escaped
    children survive (reported in the worker's `limits_not_applied`).
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
        if (pid == 0) { setsid(); for (;;) pause(); }
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
            _lib.spawn(50)
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
