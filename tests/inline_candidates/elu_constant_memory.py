"""builtin/L1/elu with alpha in __constant__ memory written from the host: the host code uses a
device symbol, which the split refuses, so this builds as one CUDA file."""
# EXPECTED_FORM = "stripped"
# TASK = "builtin/L1/elu"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

__constant__ float c_alpha[1];

__global__ void elu_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : c_alpha[0] * expm1f(x[i]);
}

torch::Tensor elu(torch::Tensor x) {
    float alpha = 1.0f;
    cudaMemcpyToSymbol(c_alpha, &alpha, sizeof(float));
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    elu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

ext = load_inline(name="elu_constant_memory", cpp_sources="torch::Tensor elu(torch::Tensor x);",
                  cuda_sources=source, functions=["elu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.elu(x.contiguous())
