"""Autotuning that behaves differently when checked and when timed: the autotuner's key includes
whether the call is one of the timing's (the warm-ups and the timed calls) or a checked one (the
judge's first look at trial 0's draw, the first call, and the correctness trials, after the
timing), and the configuration pruner keeps an exact configuration for the checked key and an
approximate one (0.3% off per element) for the timed key. Each key is tuned once, so both kinds of
call get a consistent, cached configuration. The timing's calls are told apart by their input's
address: every warm-up and timed call gets the same live input tensors, whose storage the forward
keeps alive from the timing's first call (its second call), while the first look and every trial
get a fresh clone.

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: INCORRECT
MESSAGE: sampled elements out of tolerance
EVAL_TIMEOUT_S: 120
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest), whatever configuration produced it; a 0.3% error on every element fails the
    secret samples' elementwise bound first.
"""
import torch
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
        self.calls = 0
        self.timing_input = None

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # the timing's first call: the timer's live input, kept (no clone can take its address)
            self.timing_input = x
        timed = self.timing_input is not None and x.data_ptr() == self.timing_input.data_ptr()
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        block = 1024 if x.is_cuda else 65536
        checked = 0 if timed else 1
        bias_scale_sigmoid_kernel[(triton.cdiv(n, block),)](x, self.bias, y, n, self.bias.numel(), float(self.scale),
                                                            checked, BLOCK=block)
        return y
