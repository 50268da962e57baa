"""The kernel launched on a private, non-blocking CuPy stream with no event back to torch's current
stream: a timer that records CUDA events on the current stream would measure almost nothing, and a
caller's next op could read the output before it is written.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: every RawKernel launch goes on torch's current stream whatever CuPy stream is current
    (cuda_gym/eval/cupy_support.py), so the side stream is never used: the result is correct and
    timed in full, no faster than the honest solution. Were it used, the race check (a read on the
    current stream right after forward) and the host clock around a device-wide synchronize in
    every timed call catch it as they do cuda_side_stream_unjoined.
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_gelu = cupy.RawKernel(r"""
extern "C" __global__ void gelu_kernel(const float* x, float* y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
""", "gelu_kernel")
_side = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        global _side
        if _side is None:
            _side = cupy.cuda.Stream(non_blocking=True)
        y = torch.empty_like(x)
        with _side:
            _gelu((1024,), (256,), (cupy.asarray(x), cupy.asarray(y), np.int64(x.numel())))
        return y
