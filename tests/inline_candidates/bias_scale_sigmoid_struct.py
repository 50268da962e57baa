"""builtin/L2/bias_scale_sigmoid: a struct passed by value, extern "C" kernel, a kernel attribute
set from the host, grid-stride loop, a string and a comment holding launch-like text."""
# EXPECTED_FORM = "split"
# TASK = "builtin/L2/bias_scale_sigmoid"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

struct Shape {
    long rows;
    long cols;
    float scale;
};

static const char* kName = "bias_scale_sigmoid<<<grid, block>>> { not code }";

extern "C" __global__ void bias_scale_sigmoid_kernel(const float* x, const float* bias, float* y, Shape shape) {
    long n = shape.rows * shape.cols;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float v = (x[i] + bias[i % shape.cols]) * shape.scale;
        y[i] = 1.0f / (1.0f + expf(-v));
    }
}

torch::Tensor bias_scale_sigmoid(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.dim() == 2 && bias.numel() == x.size(1), kName, ": bad shapes");
    auto y = torch::empty_like(x);
    Shape shape{x.size(0), x.size(1), (float)scale};
    TORCH_CHECK(cudaFuncSetAttribute(bias_scale_sigmoid_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 0)
                == cudaSuccess, "cudaFuncSetAttribute failed");
    int device = x.get_device(), sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    // launched as: kernel<<<sms * 8, 256, 0, stream>>>(...)
    bias_scale_sigmoid_kernel<<<dim3(sms * 8), dim3(256), 0, c10::cuda::getCurrentCUDAStream().stream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), shape);
    return y;
}
"""

module = load_inline(
    name="bias_scale_sigmoid_struct",
    cpp_sources="torch::Tensor bias_scale_sigmoid(torch::Tensor x, torch::Tensor bias, double scale);",
    cuda_sources=cuda_source,
    functions=["bias_scale_sigmoid"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        return module.bias_scale_sigmoid(x.contiguous(), self.bias, self.scale)
