"""Lazy tensor / tensor subclass that defers the work: the forward returns a torch.Tensor subclass
at once (after a decoy native call); the real GELU runs, with PyTorch ops, the first time anyone
touches the result (in __torch_function__), i.e. outside the op recorder and outside the timer.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: outputs must be plain torch.Tensor objects: the worker rejects any subclass before it
    touches the value (trials: "returned a tensor subclass"; timed calls: the checksum is NaN).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void touch(float* y, int64_t n) { if (n > 0) y[0] = 0.0f; }
""",
    functions=["void touch(float* y, int64_t n)"],
)


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def force(value):
            if isinstance(value, Deferred):
                with torch._C.DisableTorchFunctionSubclass():
                    if not value.__dict__.get("done"):
                        plain = value.__dict__["plain"]
                        plain.copy_(F.gelu(value.__dict__["source"]))
                        value.__dict__["done"] = True
                    return value.__dict__["plain"]
            return value

        args = tuple(force(a) for a in args)
        kwargs = {k: force(v) for k, v in (kwargs or {}).items()}
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        _lib.touch(y, 1)  # decoy native call
        lazy = y.as_subclass(Deferred)
        lazy.__dict__.update(plain=y, source=x, done=False)
        return lazy
