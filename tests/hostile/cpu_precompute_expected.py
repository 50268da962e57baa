"""Precomputing the expected outputs: the correctness draws are a deterministic function of the
task and the (public, default 0) seed, so the constructor makes them again with the evaluator's own
public helper as the worker does (base inputs from get_inputs() under torch.manual_seed(seed + 1);
draw i = cuda_gym.eval.draws.make_draw(base, i, seed + 2, device, get_inputs)), for the five
correctness draws (the default trial count) and the three after them (the resident timing sets),
computes their GELU with PyTorch (constructors are not under the op recorder), and the forward
returns the stored answer when the input bytes match one (native memcmp, memcpy); otherwise it
computes honestly with a plain GELU loop. The first look and every correctness trial are served
from the table.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: the inputs of the timed calls are fresh draws of the task's get_inputs() under secret
    seeds drawn in the worker (timed_inputs: never the correctness draws nor the resident timing
    sets, for a task whose get_inputs() is repeatable), so nothing precomputed matches a timed call
    and what is timed is the honest path, held to the reference by every timed call's digest. The
    correctness trials are reproducible from the public seed, so a precomputed answer passes them:
    the trick is correct but gains nothing.
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
    from cuda_gym.eval.draws import make_draw
    from cuda_gym.tasks import get_task

    namespace = get_task("builtin/L1/gelu").namespace("cpu")
    seed, trials, timing_sets = 0, 5, 3  # EvalConfig's public defaults: seed, correctness_trials, timing_input_sets
    torch.manual_seed(seed + 1)
    base = list(namespace["get_inputs"]())
    pairs = []
    for index in range(trials + timing_sets):
        given = make_draw(base, index, seed + 2, "cpu", namespace["get_inputs"]).inputs[0].contiguous()
        pairs.append((given, F.gelu(given).contiguous()))
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
