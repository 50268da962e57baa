"""Attention as one CUDA kernel in KernelBench's load_inline form, shaped like its few-shot
flash-attention example: the extension's C++ makes the running sum `l` and running max `m` with
torch::zeros / torch::full on the host and moves them to the GPU with `.to(device)` before the
launch. Those ATen calls run inside the extension call; under the strict policy they are allowed,
because no task data flows into them."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cmath>

constexpr int MAX_D = 128;

__global__ void attention_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                 const float* __restrict__ v, float* __restrict__ o, float* __restrict__ l,
                                 float* __restrict__ m, int64_t rows_per_head, int64_t rows, int d, float scale) {
    const int64_t row = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (row >= rows) return;
    const int64_t head = row / rows_per_head;
    const float* qi = q + row * d;
    const float* kh = k + head * rows_per_head * d;
    const float* vh = v + head * rows_per_head * d;
    float acc[MAX_D], qr[MAX_D];
    for (int c = 0; c < d; ++c) { acc[c] = 0.f; qr[c] = qi[c] * scale; }
    float run_max = m[row], run_sum = l[row];
    for (int64_t j = 0; j < rows_per_head; ++j) {
        float s = 0.f;
        for (int c = 0; c < d; ++c) s += qr[c] * kh[j * d + c];
        const float new_max = fmaxf(s, run_max);
        const float keep = expf(run_max - new_max), p = expf(s - new_max);
        run_sum = run_sum * keep + p;
        for (int c = 0; c < d; ++c) acc[c] = acc[c] * keep + p * vh[j * d + c];
        run_max = new_max;
    }
    for (int c = 0; c < d; ++c) o[row * d + c] = acc[c] / run_sum;
    l[row] = run_sum;
    m[row] = run_max;
}

torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
    TORCH_CHECK(q.size(3) <= MAX_D, "head_dim above ", MAX_D);
    const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), d = q.size(3);
    auto out = torch::zeros_like(q);
    auto l = torch::zeros({batch, heads, seq});                  // made on the host ...
    auto m = torch::full({batch, heads, seq}, -INFINITY);
    l = l.to(q.device());                                        // ... and moved: constants
    m = m.to(q.device());
    const int64_t rows = batch * heads * seq;
    const int threads = 128;
    attention_kernel<<<(unsigned)((rows + threads - 1) / threads), threads, 0,
                       at::cuda::getCurrentCUDAStream()>>>(
        q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
        l.data_ptr<float>(), m.data_ptr<float>(), seq, rows, (int)d, 1.0f / std::sqrt((float)d));
    return out;
}
"""

_ext = load_inline(
    name="cuda_gym_strict_attention_constants",
    cpp_sources="torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v);",
    cuda_sources=_CUDA,
    functions=["attention"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return _ext.attention(q.contiguous(), k.contiguous(), v.contiguous())
