"""Laundering a weight through a cast: the forward casts the LayerNorm weight and bias to float64
with `.to(torch.float64)` so that its (honest, native) kernel reads double-precision parameters.
The kernel is the candidate's own, but the cast is PyTorch work on the task's data.

TASK: builtin/L1/layer_norm
EXPECTED: FORBIDDEN
DEFENCE: the op recorder tracks where each tensor's data comes from: parameters are task data, and
    a dtype cast of task data (aten::_to_copy) stays FORBIDDEN under the strict policy; the message
    names the argument ("aten::_to_copy on input 0 (task data: parameter norm.weight)").
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>
extern "C" void layer_norm(const float* x, const double* w, const double* b, float* y, int64_t rows,
                           int64_t cols, double eps) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        double s = 0, v = 0;
        for (int64_t c = 0; c < cols; ++c) s += xr[c];
        const double mean = s / cols;
        for (int64_t c = 0; c < cols; ++c) { const double d = xr[c] - mean; v += d * d; }
        const double rstd = 1.0 / std::sqrt(v / cols + eps);
        for (int64_t c = 0; c < cols; ++c) yr[c] = (float)((xr[c] - mean) * rstd * w[c] + b[c]);
    }
}
""",
    functions=["void layer_norm(const float* x, const double* w, const double* b, float* y, int64_t rows, "
               "int64_t cols, double eps)"],
    extra_cflags=["-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        w = self.norm.weight.to(torch.float64)
        b = self.norm.bias.to(torch.float64)
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.layer_norm(x, w, b, y, x.numel() // cols, cols, self.norm.eps)
        return y
