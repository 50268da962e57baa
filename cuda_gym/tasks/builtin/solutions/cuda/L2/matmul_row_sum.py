"""(x @ W^T).sum(-1) computed exactly as x @ (sum_n W[n, :]): a column-sum of W (two deterministic stages), then a warp-per-row GEMV."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

// sum_n (x @ W^T)[m, n] = sum_k x[m, k] * (sum_n W[n, k]): the GEMM collapses to a GEMV with the
// column sums of W, which are recomputed on every call (the weights may change between calls).

#define THREADS 256
#define MAX_SLICES 128

template <int V> __device__ __forceinline__ void ld(const float* p, float (&r)[V]) {
    if constexpr (V == 4) {
        float4 t = *reinterpret_cast<const float4*>(p);
        r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    } else {
        r[0] = *p;
    }
}

// Stage 1: part[s, k] = sum of W[n, k] over the rows n of slice s (rows [s*rps, min(N, (s+1)*rps))).
template <int V>
__global__ void __launch_bounds__(THREADS) colsum_partial_kernel(const float* __restrict__ w, float* __restrict__ part,
                                                                 int N, int K, int rps) {
    const int kv = blockIdx.x * THREADS + threadIdx.x;
    if (kv * V >= K) return;
    const int s = blockIdx.y;
    const int n_begin = s * rps;
    int n_end = n_begin + rps;
    if (n_end > N) n_end = N;
    float acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
#pragma unroll 4
    for (int n = n_begin; n < n_end; ++n) {
        float r[V];
        ld<V>(w + (int64_t)n * K + (int64_t)kv * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += r[j];
    }
#pragma unroll
    for (int j = 0; j < V; ++j) part[(int64_t)s * K + (int64_t)kv * V + j] = acc[j];
}

// Stage 2: wsum[k] = sum_s part[s, k].
__global__ void __launch_bounds__(THREADS) colsum_final_kernel(const float* __restrict__ part, float* __restrict__ wsum,
                                                               int K, int slices) {
    const int k = blockIdx.x * THREADS + threadIdx.x;
    if (k >= K) return;
    float acc = 0.0f;
    for (int s = 0; s < slices; ++s) acc += part[(int64_t)s * K + k];
    wsum[k] = acc;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Stage 3: y[m] = dot(x[m, :], wsum); one warp per row, 8 rows per block.
template <int V>
__global__ void __launch_bounds__(THREADS) gemv_kernel(const float* __restrict__ x, const float* __restrict__ wsum,
                                                       float* __restrict__ y, int M, int K) {
    const int64_t row = (int64_t)blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (row >= M) return;
    const int lane = threadIdx.x & 31;
    const float* xr = x + row * K;
    const int nv = K / V;
    float a0 = 0.0f, a1 = 0.0f;
    int i = lane;
    for (; i + 32 < nv; i += 64) {
        float p[V], q[V], wp[V], wq[V];
        ld<V>(xr + (int64_t)i * V, p);
        ld<V>(xr + (int64_t)(i + 32) * V, q);
        ld<V>(wsum + i * V, wp);
        ld<V>(wsum + (i + 32) * V, wq);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            a0 = fmaf(p[j], wp[j], a0);
            a1 = fmaf(q[j], wq[j], a1);
        }
    }
    if (i < nv) {
        float p[V], wp[V];
        ld<V>(xr + (int64_t)i * V, p);
        ld<V>(wsum + i * V, wp);
#pragma unroll
        for (int j = 0; j < V; ++j) a0 = fmaf(p[j], wp[j], a0);
    }
    const float v = warp_sum(a0 + a1);
    if (lane == 0) y[row] = v;
}

// part: workspace of at least MAX_SLICES * K floats; wsum: K floats.
extern "C" int matmul_row_sum_forward(const float* x, const float* w, float* part, float* wsum, float* y, int M, int N,
                                      int K, cudaStream_t stream) {
    if (M <= 0) return 0;
    if (K <= 0) {
        cudaMemsetAsync(y, 0, (size_t)M * sizeof(float), stream);
        return (int)cudaGetLastError();
    }
    int slices = (N + 31) / 32;
    if (slices > MAX_SLICES) slices = MAX_SLICES;
    if (slices < 1) slices = 1;
    const int rps = (N + slices - 1) / slices;

    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) |
                           reinterpret_cast<uintptr_t>(part) | reinterpret_cast<uintptr_t>(wsum);
    const bool vec = (K % 4 == 0) && (addr & 15) == 0;
    const int kv = vec ? K / 4 : K;
    dim3 g1((kv + THREADS - 1) / THREADS, slices);
    if (vec) colsum_partial_kernel<4><<<g1, THREADS, 0, stream>>>(w, part, N, K, rps);
    else colsum_partial_kernel<1><<<g1, THREADS, 0, stream>>>(w, part, N, K, rps);
    colsum_final_kernel<<<(K + THREADS - 1) / THREADS, THREADS, 0, stream>>>(part, wsum, K, slices);
    const int blocks = (int)(((int64_t)M + THREADS / 32 - 1) / (THREADS / 32));
    if (vec) gemv_kernel<4><<<blocks, THREADS, 0, stream>>>(x, wsum, y, M, K);
    else gemv_kernel<1><<<blocks, THREADS, 0, stream>>>(x, wsum, y, M, K);
    return (int)cudaGetLastError();
}
""",
    functions=[
        "int matmul_row_sum_forward(const float* x, const float* w, float* part, float* wsum, float* y, int M, int N, "
        "int K, cudaStream_t stream)"
    ],
)

_MAX_SLICES = 128


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x):
        K = self.linear.in_features
        N = self.linear.out_features
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        part = torch.empty((_MAX_SLICES, max(K, 1)), dtype=x.dtype, device=x.device)
        wsum = torch.empty((max(K, 1),), dtype=x.dtype, device=x.device)
        err = _lib.matmul_row_sum_forward(x, self.linear.weight, part, wsum, y, y.numel(), N, K)
        if err:
            raise RuntimeError(f"matmul_row_sum kernel launch failed: CUDA error {err}")
        return y
