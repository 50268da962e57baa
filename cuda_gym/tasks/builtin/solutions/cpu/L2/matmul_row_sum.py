"""(x @ W^T).sum(-1) computed exactly as x @ (W^T 1): column sums of W, then a GEMV, both in double."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
#include <vector>

// out[m] = sum_n sum_k x[m,k] W[n,k] = sum_k x[m,k] * (sum_n W[n,k]); O(NK + MK) instead of O(MNK).
extern "C" void matmul_row_sum(const float* x, const float* w, float* out, int64_t M, int64_t N, int64_t K) {
    std::vector<double> ws(K, 0.0);
    #pragma omp parallel
    {
        std::vector<double> part(K, 0.0);
        #pragma omp for schedule(static) nowait
        for (int64_t n = 0; n < N; ++n) {
            const float* wn = w + n * K;
            #pragma omp simd
            for (int64_t k = 0; k < K; ++k) part[k] += wn[k];
        }
        #pragma omp critical
        for (int64_t k = 0; k < K; ++k) ws[k] += part[k];
        #pragma omp barrier
        #pragma omp for schedule(static)
        for (int64_t m = 0; m < M; ++m) {
            const float* xm = x + m * K;
            double s = 0.0;
            #pragma omp simd reduction(+ : s)
            for (int64_t k = 0; k < K; ++k) s += xm[k] * ws[k];
            out[m] = static_cast<float>(s);
        }
    }
}
""",
    functions=["void matmul_row_sum(const float* x, const float* w, float* out, int64_t M, int64_t N, int64_t K)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        x = x.contiguous()
        K = x.size(-1)
        out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        _lib.matmul_row_sum(x, self.linear.weight, out, x.numel() // K, self.linear.out_features, K)
        return out
