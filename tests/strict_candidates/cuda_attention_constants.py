"""Attention as one CUDA kernel with an online softmax (running row max `m` and row sum `l`, as a
flash-attention kernel keeps them). Like KernelBench's few-shot flash-attention example, the forward
makes `l` and `m` with torch.zeros / torch.full on the host and moves them with `.to(device)`
before the kernel uses them: under the strict policy those moves are allowed, because no task data
flows into them."""
import math

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

constexpr int MAX_D = 128;

// One thread per (batch, head, query) row; keys and values are read through the L1/L2 caches.
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

extern "C" int attention_forward(const float* q, const float* k, const float* v, float* o, float* l, float* m,
                                 int64_t rows_per_head, int64_t rows, int d, float scale, cudaStream_t stream) {
    if (d > MAX_D) return 1;
    const int threads = 128;
    attention_kernel<<<(unsigned)((rows + threads - 1) / threads), threads, 0, stream>>>(
        q, k, v, o, l, m, rows_per_head, rows, d, scale);
    return (int)cudaGetLastError();
}
""",
    functions=["int attention_forward(const float* q, const float* k, const float* v, float* o, float* l, "
               "float* m, int64_t rows_per_head, int64_t rows, int d, float scale, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        batch, heads, seq, d = q.shape
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.zeros_like(q)
        l = torch.zeros(batch, heads, seq)                  # made on the host ...
        m = torch.full((batch, heads, seq), -math.inf)
        l = l.to(q.device)                                  # ... and moved to the GPU: constants
        m = m.to(q.device)
        status = _lib.attention_forward(q, k, v, out, l, m, seq, batch * heads * seq, d, 1.0 / math.sqrt(d))
        if status != 0:
            raise RuntimeError(f"attention_forward failed (status {status})")
        return out
