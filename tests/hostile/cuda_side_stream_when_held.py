"""Honest while the timer's GPU is idle, side stream while it is busy: the forward checks whether the
current stream still has work queued (as it has during a held repeat, where the timer holds the
GPU before the start event) and then launches its kernel on a private stream that the current
stream never waits for, hoping the held repeats time nothing.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
NEEDS: held_timing
DEFENCE: the hold kernel fills every SM, so the side-stream kernel cannot run during the hold; it
    runs after the end event, and the device-wide synchronize that follows the end event of every
    held repeat measures it (flag `work_outside_current_stream`): work left running on another
    stream when the call returned is a race, and the verdict is INCORRECT.
"""
import torch
import torch.nn as nn

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


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        current = torch.cuda.current_stream()
        stream = self.side if not current.query() else current  # busy: a held repeat
        _lib.gelu(x, y, x.numel(), stream.cuda_stream)
        return y
