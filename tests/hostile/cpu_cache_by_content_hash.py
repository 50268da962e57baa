"""Output cached by a hash of the input's content: a fast 64-bit hash of the bytes is cheaper than
the work (the bigger the task's arithmetic intensity, the bigger the "speedup"), and it is
semantically exact, so it survives address rotation. Misses compute honestly (plain OpenMP GELU).

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: every timed call sees content never seen before (each timed call loads its own variant:
    an input set rotated by a secret random shift, with its own reference checksum), so the cache
    never hits while timed; what is measured is hash + honest compute, no faster than the honest
    solution.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" uint64_t content_hash(const uint64_t* w, int64_t words) {
    uint64_t h[4] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full, 0x165667B19E3779F9ull, 0x27D4EB2F165667C5ull};
    int64_t i = 0;
    for (; i + 4 <= words; i += 4)
        for (int k = 0; k < 4; ++k) h[k] = (h[k] ^ w[i + k]) * 0x100000001B3ull;
    for (; i < words; ++i) h[0] = (h[0] ^ w[i]) * 0x100000001B3ull;
    return h[0] ^ (h[1] << 1) ^ (h[2] << 2) ^ (h[3] << 3);
}
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
extern "C" void copy(const float* src, float* dst, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
""",
    functions=["uint64_t content_hash(const uint64_t* w, int64_t words)",
               "void gelu(const float* x, float* y, int64_t n)",
               "void copy(const float* src, float* dst, int64_t n)"],
    extra_cflags=["-fopenmp", "-O3"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (tuple(x.shape), _lib.content_hash(x, x.numel() // 2))
        hit = self.memo.get(key)
        if hit is not None:
            return hit  # same content as an earlier call: no work at all
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel())
        self.memo[key] = y
        return y
