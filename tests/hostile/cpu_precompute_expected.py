"""Precomputing the expected outputs: the evaluator's input draws are a deterministic function of
the task and the (public, default 0) seed, so the constructor reproduces them with the evaluator's
own helpers, computes the reference outputs with PyTorch (constructors are not under the op
recorder), and the forward returns the stored answer when the input bytes match (native memcmp,
memcpy); otherwise it computes honestly with a plain GELU loop.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: the inputs of timed calls are secret variants (each input set rotated by a random shift
    drawn in the worker after the reference ran), so nothing precomputed ever matches a timed call;
    what is timed is the honest path. (The correctness trials themselves are reproducible from the
    seed, so a precomputed answer can pass them; the per-call checksums of the timed calls still
    check the honest path's results.)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
#include <cstring>
extern "C" int same(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }
extern "C" void copy(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }
extern "C" void gelu(const float* x, float* y, int64_t n) {
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
}
""",
    functions=["int same(const float* a, const float* b, int64_t n)",
               "void copy(const float* src, float* dst, int64_t n)",
               "void gelu(const float* x, float* y, int64_t n)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


def _expected_pairs():
    from cuda_gym.eval.correctness import make_draws
    from cuda_gym.tasks import get_task

    namespace = get_task("builtin/L1/gelu").namespace("cpu")
    seed = 0
    torch.manual_seed(seed + 1)
    base = list(namespace["get_inputs"]())
    pairs = []
    for draw in make_draws(base, 5 + 3, seed + 2, "cpu"):
        pairs.append((draw.inputs[0].contiguous(), F.gelu(draw.inputs[0]).contiguous()))
    return pairs


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        state = torch.get_rng_state()
        try:
            self.pairs = _expected_pairs()
        except Exception:
            self.pairs = []
        torch.set_rng_state(state)

    def forward(self, x):
        y = torch.empty_like(x)
        for given, expected in self.pairs:
            if given.shape == x.shape and _lib.same(given, x, x.numel()):
                _lib.copy(expected, y, y.numel())
                return y
        _lib.gelu(x, y, x.numel())
        return y
