"""Attention in KernelBench's load_inline form on the CPU, shaped like its few-shot flash-attention
example: the extension's C++ makes the running sum `l` and running max `m` with torch::zeros /
torch::full in float64 and casts them to the inputs' dtype with `.to(...)` (an ATen `_to_copy`
dispatched from C++, as `.to(device)` is on the GPU) before its loop uses them as scratch. Under
the strict policy those casts are allowed: no task data flows into them."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>
#include <cmath>

torch::Tensor attention(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
    TORCH_CHECK(q.scalar_type() == torch::kFloat && q.is_contiguous() && k.is_contiguous() && v.is_contiguous());
    const int64_t batch = q.size(0), heads = q.size(1), seq = q.size(2), d = q.size(3);
    auto out = torch::zeros_like(q);
    auto l = torch::zeros({batch, heads, seq}, torch::kDouble);                  // made in C++ ...
    auto m = torch::full({batch, heads, seq}, -INFINITY, torch::kDouble);
    l = l.to(q.scalar_type());                                                   // ... and cast: constants
    m = m.to(q.scalar_type());
    const float* qp = q.data_ptr<float>();
    const float* kp = k.data_ptr<float>();
    const float* vp = v.data_ptr<float>();
    float* op = out.data_ptr<float>();
    float* lp = l.data_ptr<float>();
    float* mp = m.data_ptr<float>();
    const float scale = 1.0f / std::sqrt((float)d);
    for (int64_t row = 0; row < batch * heads * seq; ++row) {
        const int64_t head = row / seq;
        const float* qi = qp + row * d;
        const float* kh = kp + head * seq * d;
        const float* vh = vp + head * seq * d;
        float* oi = op + row * d;
        float run_max = mp[row], run_sum = lp[row];
        for (int64_t j = 0; j < seq; ++j) {
            float s = 0.f;
            for (int64_t c = 0; c < d; ++c) s += qi[c] * kh[j * d + c];
            s *= scale;
            const float new_max = s > run_max ? s : run_max;
            const float keep = std::exp(run_max - new_max), p = std::exp(s - new_max);
            run_sum = run_sum * keep + p;
            for (int64_t c = 0; c < d; ++c) oi[c] = oi[c] * keep + p * vh[j * d + c];
            run_max = new_max;
        }
        for (int64_t c = 0; c < d; ++c) oi[c] /= run_sum;
        lp[row] = run_sum;
        mp[row] = run_max;
    }
    return out;
}
"""

_ext = load_inline(name="cuda_gym_strict_cpu_attention_constants", cpp_sources=[_CPP], functions=["attention"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return _ext.attention(q.contiguous(), k.contiguous(), v.contiguous())
