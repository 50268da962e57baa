"""Checked calls exact, timed calls at TF32 precision (CUDA): in every call of the timing (the
warm-ups and the timed calls) the kernel rounds its inputs to TF32's 10 mantissa bits before the
GELU, as tensor-core TF32 math does to fp32 operands; in the checked calls (the judge's first look
at trial 0's draw, the first call, and the correctness trials, after the timing) it computes in
fp32. TF32 in every call is INCORRECT (cuda_precision_tf32_rounding); switched on only when timed,
a per-call checksum of the sum and L1 norm at 5e-4 of the L1 norm would let it through. The
timing's calls are told apart by their input's address: every warm-up and timed call gets the same
live input tensors, whose storage the forward keeps alive from the timing's first call (its second
call), while the first look and every trial get a fresh clone.

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
MESSAGE: returned a wrong result
DEFENCE: every timed call's output is held to the trials' tolerances through its digest
    (output_digest: secret samples within the elementwise bound, a sketch of the relative-norm
    error over every element).
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <cstdint>
__device__ __forceinline__ float to_tf32(float v) {
    unsigned int b = __float_as_uint(v);
    b = (b + 0x1000u) & 0xFFFFE000u;
    return __uint_as_float(b);
}
__global__ void gelu_kernel(const float* x, float* y, int64_t n, int rounded) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = rounded ? to_tf32(x[i]) : x[i];
        y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}
extern "C" void gelu(const float* x, float* y, int64_t n, int64_t rounded, cudaStream_t stream) {
    gelu_kernel<<<1024, 256, 0, stream>>>(x, y, n, (int)rounded);
}
''',
    functions=["void gelu(const float* x, float* y, int64_t n, int64_t rounded, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.timing_input = None

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:  # the timing's first call: the timer's live input, kept (no clone can take its address)
            self.timing_input = x
        timed = self.timing_input is not None and x.data_ptr() == self.timing_input.data_ptr()
        y = torch.empty_like(x)
        _lib.gelu(x, y, x.numel(), 1 if timed else 0, torch.cuda.current_stream().cuda_stream)
        return y
