"""builtin/L1/matmul as a cuBLAS-only wrapper (no __global__ kernel), in KernelBench's load_inline style."""
# EXPECTED_FORM = "split"
# TASK = "builtin/L1/matmul"
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

torch::Tensor matmul_cublas(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda() && a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0));
    auto A = a.contiguous();
    auto B = b.contiguous();
    const int m = A.size(0), k = A.size(1), n = B.size(1);
    auto C = torch::empty({m, n}, A.options());
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    const float alpha = 1.0f, beta = 0.0f;
    // Row-major C = A B is column-major C^T = B^T A^T: pass B first, leading dimensions n, k, n.
    cublasStatus_t status = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
                                        B.data_ptr<float>(), n, A.data_ptr<float>(), k, &beta,
                                        C.data_ptr<float>(), n);
    TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "cublasSgemm failed");
    return C;
}
"""

matmul_cpp_source = "torch::Tensor matmul_cublas(torch::Tensor a, torch::Tensor b);"

matmul = load_inline(
    name="cublas_matmul_wrapper",
    cpp_sources=matmul_cpp_source,
    cuda_sources=matmul_source,
    functions=["matmul_cublas"],
    verbose=False,
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.matmul = matmul

    def forward(self, a, b):
        return self.matmul.matmul_cublas(a, b)
