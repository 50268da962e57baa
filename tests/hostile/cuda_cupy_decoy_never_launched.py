"""A decoy CuPy kernel: a RawKernel for the task is built (so the source "is a CuPy candidate") but
never launched; PyTorch does the work.

TASK: builtin/L2/bias_scale_sigmoid
EXPECTED: FORBIDDEN
DEFENCE: the op recorder records aten::add / aten::mul / aten::sigmoid on the task's data (strict:
    PyTorch compute), and no CuPy launch was counted as a call of the candidate's own code
    (cuda_gym/eval/cupy_support.py).
"""
import cupy
import torch
import torch.nn as nn

_kernel = cupy.RawKernel(r"""
extern "C" __global__ void bias_scale_sigmoid_kernel(const float* x, const float* bias, float* y, long long n,
                                                     int dim, float scale) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 1.0f / (1.0f + expf(-((x[i] + bias[i % dim]) * scale)));
}
""", "bias_scale_sigmoid_kernel")


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        return torch.sigmoid((x + self.bias) * self.scale)
