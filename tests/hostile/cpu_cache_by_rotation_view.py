"""Cache modulo the judge's rotation, answered by a zero-copy view: when every timed input was one of a
few resident input sets with each tensor's flat elements rotated by a secret shift, and an elementwise
op commutes with a rotation. The candidate keeps the first inputs it sees (the warm-ups cover every
timing set before any timed call) with a small hash of every 64th position, and the exact GELU of
each, written twice in a row into one buffer. For a new input it finds the shift from 64 look-ups,
verifies 256 positions, and returns the slice of the doubled buffer that starts at the rotation: a
contiguous view, so a timed call costs microseconds whatever the size, and every output it returns
is the exact, correct answer (the digest and the trials see nothing wrong). A real input that is
no rotation of a cached one gets the real kernel.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: every timed call gets a fresh draw of the task's inputs under a secret seed
    (timed_inputs.py): no timed input is a rearrangement of one seen before, so the look-up
    never hits and the candidate computes every call.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

struct Entry { int64_t n; std::vector<float> x; std::unordered_map<uint64_t, int64_t> at; };
static std::vector<Entry> entries;
static const int64_t STRIDE = 64;

static inline uint64_t key(const float* x, int64_t n, int64_t p) {
    uint32_t a, b; std::memcpy(&a, x + p, 4); std::memcpy(&b, x + (p + 1) % n, 4);
    return (uint64_t(a) << 32) | b;
}

// (entry << 40) | shift when x is entry's input rotated by shift (torch.roll order), else -1.
extern "C" int64_t find_rotation(const float* x, int64_t n) {
    for (size_t e = 0; e < entries.size(); ++e) {
        const Entry& c = entries[e];
        if (c.n != n || n < 2 * STRIDE) continue;
        for (int64_t j = 0; j < STRIDE; ++j) {
            auto hit = c.at.find(key(x, n, j));
            if (hit == c.at.end()) continue;
            int64_t s = ((j - hit->second) % n + n) % n;
            bool same = true;
            uint64_t r = 0x9E3779B97F4A7C15ull;
            for (int k = 0; k < 256 && same; ++k) {
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                int64_t i = int64_t(r % uint64_t(n));
                same = x[i] == c.x[((i - s) % n + n) % n];
            }
            if (same) return (int64_t(e) << 40) | s;
        }
    }
    return -1;
}

extern "C" int64_t remember(const float* x, int64_t n) {
    if (entries.size() >= 4) return -1;
    Entry c; c.n = n; c.x.assign(x, x + n);
    for (int64_t p = 0; p + 1 < n; p += STRIDE) c.at.emplace(key(x, n, p), p);
    entries.push_back(std::move(c));
    return int64_t(entries.size()) - 1;
}

// y[0:n] = y[n:2n] = exact GELU of x.
extern "C" void gelu_twice(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
    std::memcpy(y + n, y, sizeof(float) * n);
}
""",
    functions=["int64_t find_rotation(const float* x, int64_t n)", "int64_t remember(const float* x, int64_t n)",
               "void gelu_twice(const float* x, float* y, int64_t n)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.doubled = []

    def forward(self, x):
        n = x.numel()
        found = _lib.find_rotation(x, n)
        if found >= 0:
            doubled, shift = self.doubled[found >> 40], found & ((1 << 40) - 1)
            return doubled[n - shift: 2 * n - shift].view(x.shape)
        doubled = torch.empty(2 * n, dtype=x.dtype, device=x.device)
        _lib.gelu_twice(x, doubled, n)
        if _lib.remember(x, n) >= 0:
            self.doubled.append(doubled)
        return doubled[:n].view(x.shape)
