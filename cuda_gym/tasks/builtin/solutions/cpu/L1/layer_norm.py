"""LayerNorm over the last dim: two-pass mean/variance per row, fused normalize+affine, rows over OpenMP."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

extern "C" void layer_norm_forward(const float* x, const float* w, const float* b, float* y,
                                   int64_t rows, int64_t cols, float eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float s = 0.f;
        #pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        float mean = s / cols;
        float v = 0.f;
        #pragma omp simd reduction(+ : v)
        for (int64_t c = 0; c < cols; ++c) { float d = xr[c] - mean; v += d * d; }
        float rstd = 1.f / std::sqrt(v / cols + eps);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}
""",
    functions=["void layer_norm_forward(const float* x, const float* w, const float* b, float* y, "
               "int64_t rows, int64_t cols, float eps)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.layer_norm_forward(x, self.norm.weight, self.norm.bias, y, x.numel() // cols, cols, self.norm.eps)
        return y
