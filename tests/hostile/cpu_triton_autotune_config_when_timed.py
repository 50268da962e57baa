"""Autotuning that behaves differently when checked and when timed: the autotuner's key includes
whether a profiler runs (the correctness trials run under the op recorder's profiler session,
the timed calls do not), and the configuration pruner keeps an exact configuration for the
checked key and an approximate one (0.3% off per element) for the timed key. Each key is tuned
once, so both kinds of call get a consistent, cached configuration.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest), whatever configuration produced it.
"""
import torch
import torch.autograd.profiler as profiler
import torch.nn as nn
import triton
import triton.language as tl


def _prune(configs, named_args, **kwargs):
    checked = bool(named_args["CHECKED"])
    return [c for c in configs if c.kwargs["APPROXIMATE"] != checked]


@triton.autotune(configs=[triton.Config({"APPROXIMATE": 0}), triton.Config({"APPROXIMATE": 1})],
                 key=["n", "CHECKED"], prune_configs_by={"early_config_prune": _prune})
@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, CHECKED, BLOCK: tl.constexpr, APPROXIMATE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    if APPROXIMATE:
        y = y * tl.where((offsets % 2) == 1, 1.003, 0.997)
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        checked = 1 if profiler._is_profiler_enabled else 0
        gelu_kernel[(triton.cdiv(n, block),)](x, y, n, checked, BLOCK=block)
        return y
