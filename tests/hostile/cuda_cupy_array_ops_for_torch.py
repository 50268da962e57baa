"""CuPy's array operations standing in for PyTorch: the forward wraps the tensors as CuPy arrays (no
copy) and computes with CuPy's elementwise routines, which the op recorder (an ATen dispatch mode)
never sees. One RawKernel launch (a copy into the output) makes the forward "call its own kernel".

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: FORBIDDEN
DEFENCE: the profiled forward ran kernels that CuPy's own routines name (cupy_add, cupy_multiply,
    cupy_exp ...), and for a candidate whose only native code is CuPy kernels every kernel that is
    neither PyTorch's nor one it launched is CuPy library work: under the strict policy it is
    judged as PyTorch compute on the task's data (cuda_gym/eval/cupy_support.library_kernels).
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_copy = cupy.RawKernel(r"""
extern "C" __global__ void copy_kernel(const float* src, float* dst, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
""", "copy_kernel")


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        xs, bias = cupy.asarray(x.contiguous()), cupy.asarray(self.bias.detach())
        z = (xs + bias) * self.scale
        result = 1.0 / (1.0 + cupy.exp(-z))
        y = torch.empty_like(x)
        n = y.numel()
        _copy(((n + 255) // 256,), (256,), (result, cupy.asarray(y), np.int64(n)))
        return y
