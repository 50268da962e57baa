"""Autotuning that behaves differently when checked and when timed: the autotuner's key includes
whether a profiler runs (the correctness trials run under the op recorder's profiler session,
the timed calls do not), and the configuration pruner keeps an exact configuration for the
checked key and an approximate one (0.3% off per element) for the timed key. Each key is tuned
once, so both kinds of call get a consistent, cached configuration.

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: INCORRECT
EVAL_TIMEOUT_S: 120
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
def bias_scale_sigmoid_kernel(x_ptr, bias_ptr, y_ptr, n, dim, scale, CHECKED, BLOCK: tl.constexpr,
                              APPROXIMATE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    z = (tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % dim, mask=mask)) * scale
    y = 1.0 / (1.0 + tl.exp(-z))
    if APPROXIMATE:
        y = y * tl.where((offsets % 2) == 1, 1.003, 0.997)
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        checked = 1 if profiler._is_profiler_enabled else 0
        bias_scale_sigmoid_kernel[(triton.cdiv(n, block),)](x, self.bias, y, n, self.bias.numel(), float(self.scale),
                                                            checked, BLOCK=block)
        return y
