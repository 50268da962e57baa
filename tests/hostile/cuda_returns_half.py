"""Precision downgrade in the output dtype (CUDA): the kernel computes in fp32 and stores fp16; the
forward returns a torch.float16 tensor for an fp32 task.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: the output dtype must equal the reference's.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>
__global__ void gelu_half(const float* x, __half* y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __float2half(0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f)));
}
extern "C" void gelu(const float* x, void* y, int64_t n, cudaStream_t stream) {
    gelu_half<<<1024, 256, 0, stream>>>(x, static_cast<__half*>(y), n);
}
''',
    functions=["void gelu(const float* x, void* y, int64_t n, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty(x.shape, dtype=torch.float16, device=x.device)
        _lib.gelu(x, y, x.numel())
        return y
