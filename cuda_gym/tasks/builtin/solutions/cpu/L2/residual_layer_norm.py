"""LayerNorm(x + y): per row, the sum is written once, then two-pass mean/variance and normalize in place."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

extern "C" void residual_layer_norm(const float* x, const float* y, const float* w, const float* b, float* out,
                                    int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        const float* yr = y + r * cols;
        float* o = out + r * cols;
        float s = 0.f;
        #pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) { float v = xr[c] + yr[c]; o[c] = v; s += v; }
        float mean = s / cols;
        float var = 0.f;
        #pragma omp simd reduction(+ : var)
        for (int64_t c = 0; c < cols; ++c) { float d = o[c] - mean; var += d * d; }
        float rstd = 1.f / std::sqrt(var / cols + eps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) o[c] = (o[c] - mean) * rstd * w[c] + b[c];
    }
}
""",
    functions=["void residual_layer_norm(const float* x, const float* y, const float* w, const float* b, "
               "float* out, int64_t rows, int64_t cols, float eps)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        cols = x.size(-1)
        _lib.residual_layer_norm(x, y, self.norm.weight, self.norm.bias, out, x.numel() // cols, cols,
                                 self.norm.eps)
        return out
