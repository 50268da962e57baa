"""builtin/L1/gelu with a templated kernel under AT_DISPATCH: the split refuses templates (their
kernels are instantiated by host launches), so this builds as one CUDA file."""
# EXPECTED_FORM = "stripped"
# TASK = "builtin/L1/gelu"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

template <typename scalar_t>
__global__ void gelu_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) {
        float v = static_cast<float>(x[i]);
        y[i] = static_cast<scalar_t>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
    }
}

torch::Tensor gelu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    int threads = 512;
    int blocks = (int)((n + threads - 1) / threads);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gelu", ([&] {
        gelu_kernel<scalar_t><<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
    }));
    return y;
}
"""

ext = load_inline(name="gelu_template_dispatch", cpp_sources="torch::Tensor gelu(torch::Tensor x);",
                  cuda_sources=source, functions=["gelu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.gelu(x.contiguous())
