"""Work on a side stream that the current stream does not wait for: the kernel is launched on a
private stream and the forward returns without any event or synchronize, so a timer that records
CUDA events on the current stream measures almost nothing.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: a race, rejected under both policies: right after the forward returns, each correctness
    trial reads the output at secret positions with an op on the caller's current stream (as the
    caller's next op would) and compares that with the output after a device-wide synchronize;
    every timed repetition is also measured with the host clock around a device-wide synchronize,
    and work that outlasts the current stream (flag `work_outside_current_stream`) is INCORRECT too.
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
        _lib.gelu(x, y, x.numel(), self.side.cuda_stream)  # never joined with the current stream
        return y
