"""Inclusive scan over the last dim with a double running sum per row, rows split over OpenMP threads."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>

extern "C" void cumsum_last_dim(const float* x, float* y, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) { s += xr[c]; yr[c] = static_cast<float>(s); }
    }
}
""",
    functions=["void cumsum_last_dim(const float* x, float* y, int64_t rows, int64_t cols)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.cumsum_last_dim(x, y, x.numel() // cols, cols)
        return y
