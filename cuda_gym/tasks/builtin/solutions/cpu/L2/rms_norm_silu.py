"""silu(x / sqrt(mean(x^2) + eps) * w): per row a double sum of squares, then one fused vectorized pass."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

// exp(x) = 2^n * e^r: n = round(x/ln2) by the 1.5*2^23 trick, |r| <= ln2/2, degree-7 Taylor; 0 below -87.3.
static inline float exp_f(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    float t = xc * 1.44269504088896341f + 12582912.f;
    float n = t - 12582912.f;
    float r = xc - n * 0.693145751953125f - n * 1.428606820309417e-6f;
    float p = 1.f / 5040.f;
    p = p * r + 1.f / 720.f; p = p * r + 1.f / 120.f; p = p * r + 1.f / 24.f;
    p = p * r + 1.f / 6.f; p = p * r + 0.5f; p = p * r + 1.f; p = p * r + 1.f;
    float s = __builtin_bit_cast(float, (__builtin_bit_cast(int32_t, t) - 0x4B400000 + 127) << 23);
    return x < -87.3f ? 0.f : p * s;
}

extern "C" void rms_norm_silu(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double ss = 0.0;
        #pragma omp simd reduction(+ : ss)
        for (int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
        float rms = std::sqrt(static_cast<float>(ss / cols) + eps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            float z = xr[c] / rms * w[c];
            yr[c] = z / (1.f + exp_f(-z));
        }
    }
}
""",
    functions=["void rms_norm_silu(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.rms_norm_silu(x, self.weight, y, x.numel() // cols, cols, float(self.eps))
        return y
