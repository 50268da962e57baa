"""Attention in one native loop with an online softmax (running row max `m` and row sum `l`, as a
flash-attention kernel keeps them). The forward makes `l` and `m` as constants on the host in
float64 and moves them to the inputs' device and dtype before the kernel uses them as scratch:
under the strict policy those moves are allowed, because no task data flows into them."""
import math

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

// One (batch, head, query) row per iteration: s_j = q.k_j * scale, o = sum_j softmax(s)_j v_j with
// the running max m and running sum l rescaled as each key arrives.
extern "C" void attention_forward(const float* q, const float* k, const float* v, float* o, float* l,
                                  float* m, int64_t rows_per_head, int64_t heads_total, int64_t d,
                                  float scale) {
    #pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < heads_total * rows_per_head; ++row) {
        const int64_t head = row / rows_per_head;
        const float* qi = q + row * d;
        const float* kh = k + head * rows_per_head * d;
        const float* vh = v + head * rows_per_head * d;
        float* oi = o + row * d;
        float run_max = m[row], run_sum = l[row];
        for (int64_t c = 0; c < d; ++c) oi[c] = 0.f;
        for (int64_t j = 0; j < rows_per_head; ++j) {
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
        l[row] = run_sum;
        m[row] = run_max;
    }
}
""",
    functions=["void attention_forward(const float* q, const float* k, const float* v, float* o, float* l, "
               "float* m, int64_t rows_per_head, int64_t heads_total, int64_t d, float scale)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        batch, heads, seq, d = q.shape
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = torch.zeros_like(q)
        l = torch.zeros(batch, heads, seq, dtype=torch.float64)           # made on the host ...
        m = torch.full((batch, heads, seq), -math.inf, dtype=torch.float64)
        l = l.to(q.device).to(q.dtype)                                     # ... and moved: constants
        m = m.to(device=q.device, dtype=q.dtype)
        _lib.attention_forward(q, k, v, out, l, m, seq, batch * heads, d, 1.0 / math.sqrt(d))
        return out
