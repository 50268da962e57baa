"""Tensor subclass that defers the work (CUDA): returned at once, computed with PyTorch only when
first touched, outside the recorder and the timer.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: outputs must be plain torch.Tensor objects (trials: rejected; timed calls: NaN checksum).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

extern "C" void gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    gelu_kernel<<<1024, 256, 0, stream>>>(x, y, n);
}
''',
    functions=["void gelu(const float* x, float* y, int64_t n, cudaStream_t stream)"],
)


class Deferred(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        def force(value):
            if isinstance(value, Deferred):
                with torch._C.DisableTorchFunctionSubclass():
                    if not value.__dict__.get("done"):
                        value.__dict__["plain"].copy_(F.gelu(value.__dict__["source"]))
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
        _lib.gelu(y[:1], y[:1], 1)  # decoy launch
        lazy = y.as_subclass(Deferred)
        lazy.__dict__.update(plain=y, source=x, done=False)
        return lazy
