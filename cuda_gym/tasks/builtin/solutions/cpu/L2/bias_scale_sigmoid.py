"""sigmoid((x + bias) * scale) as one OpenMP loop over rows with a vectorized exp."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
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

extern "C" void bias_scale_sigmoid(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                   float scale) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = 1.f / (1.f + exp_f(-((xr[c] + bias[c]) * scale)));
    }
}
""",
    functions=["void bias_scale_sigmoid(const float* x, const float* bias, float* y, int64_t rows, int64_t cols, "
               "float scale)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.bias_scale_sigmoid(x, self.bias, y, x.numel() // cols, cols, float(self.scale))
        return y
