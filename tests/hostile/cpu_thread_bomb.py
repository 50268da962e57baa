"""Thread bomb: the first forward starts 2000 detached threads (64 KB stacks) that sleep forever,
then computes honestly.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: threads die with the worker process, which runs exactly one job and is killed at its
    end; the address-space cap bounds what thread stacks can reserve.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <pthread.h>
#include <unistd.h>
static void* sleeper(void*) { for (;;) pause(); return nullptr; }
extern "C" int spawn_threads(int count) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int made = 0;
    for (int k = 0; k < count; ++k) {
        pthread_t t;
        if (pthread_create(&t, &attr, sleeper, nullptr) == 0) ++made;
    }
    pthread_attr_destroy(&attr);
    return made;
}
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["int spawn_threads(int count)", "void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp", "-pthread"],
    extra_ldflags=["-fopenmp", "-pthread"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.spawned = False

    def forward(self, x):
        if not self.spawned:
            self.spawned = True
            _lib.spawn_threads(2000)
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        return y
