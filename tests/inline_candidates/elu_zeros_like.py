"""builtin/L1/elu in KernelBench's own example style: zeros_like, default stream, empty flags."""
# EXPECTED_FORM = "split"
# TASK = "builtin/L1/elu"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

elu_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elu_kernel(const float* x, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        float v = x[idx];
        out[idx] = v > 0.0f ? v : expm1f(v);
    }
}

torch::Tensor elu_cuda(torch::Tensor x) {
    auto size = x.numel();
    auto out = torch::zeros_like(x);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

elu_cpp_source = "torch::Tensor elu_cuda(torch::Tensor x);"

elu = load_inline(
    name="elu_zeros_like",
    cpp_sources=elu_cpp_source,
    cuda_sources=elu_source,
    functions=["elu_cuda"],
    verbose=False,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.elu = elu

    def forward(self, x):
        return self.elu.elu_cuda(x)
