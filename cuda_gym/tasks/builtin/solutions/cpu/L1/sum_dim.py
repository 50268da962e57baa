"""Sum over the last dim with vectorized double-precision accumulation, rows split over OpenMP threads."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>

extern "C" void sum_last_dim(const float* x, float* y, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        double s = 0.0;
        #pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        y[r] = static_cast<float>(s);
    }
}
""",
    functions=["void sum_last_dim(const float* x, float* y, int64_t rows, int64_t cols)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        cols = x.size(-1)
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        _lib.sum_last_dim(x, y, x.numel() // cols, cols)
        return y
