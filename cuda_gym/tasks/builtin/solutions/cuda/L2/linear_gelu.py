"""gelu(x @ W^T + b): fp32 cuBLAS SGEMM, then one fused in-place bias + exact-GELU epilogue kernel (float4)."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdint>

#define THREADS 256
#define RPB 4

template <int V> __device__ __forceinline__ void ld(const float* p, float (&r)[V]) {
    if constexpr (V == 4) {
        float4 t = *reinterpret_cast<const float4*>(p);
        r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
    } else {
        r[0] = *p;
    }
}
template <int V> __device__ __forceinline__ void st(float* p, const float (&r)[V]) {
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
        *p = r[0];
    }
}

// y[r, c] = gelu(y[r, c] + b[c]) in place; grid.x over columns (V per thread), grid.y strides over row groups.
template <int V>
__global__ void __launch_bounds__(THREADS) bias_gelu_kernel(float* __restrict__ y, const float* __restrict__ b,
                                                            int rows, int cols) {
    const int nv = cols / V;
    const int cv = blockIdx.x * THREADS + threadIdx.x;
    if (cv >= nv) return;
    float bv[V];
    ld<V>(b + (int64_t)cv * V, bv);
    for (int64_t r0 = (int64_t)blockIdx.y * RPB; r0 < rows; r0 += (int64_t)gridDim.y * RPB) {
        float v[RPB][V];
#pragma unroll
        for (int u = 0; u < RPB; ++u)
            if (r0 + u < rows) ld<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
#pragma unroll
        for (int u = 0; u < RPB; ++u) {
            if (r0 + u < rows) {
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float t = v[u][j] + bv[j];
                    v[u][j] = 0.5f * t * (1.0f + erff(t * 0.70710678118654752f));
                }
                st<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
            }
        }
    }
}

static cublasHandle_t get_handle() {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
    return handle;
}

// Returns 0, a CUDA error code, or 10000 + a cuBLAS status.
extern "C" int linear_gelu_forward(const float* x, const float* w, const float* b, float* y, int M, int N, int K,
                                   cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    cublasHandle_t h = get_handle();
    if (h == nullptr) return 10000 + (int)CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = cublasSetStream(h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    // Row-major y[M,N] = x[M,K] @ w[N,K]^T  <=>  column-major y^T[N,M] = w^T(op T of a KxN) * x^T[K,M].
    const float alpha = 1.0f, beta = 0.0f;
    s = cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, K, x, K, &beta, y, N);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;

    const uintptr_t addr = reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(b);
    const bool vec = (N % 4 == 0) && (addr & 15) == 0;
    const int nv = vec ? N / 4 : N;
    int64_t gy = ((int64_t)M + RPB - 1) / RPB;
    if (gy > 65535) gy = 65535;
    dim3 grid((nv + THREADS - 1) / THREADS, (unsigned)gy);
    if (vec) bias_gelu_kernel<4><<<grid, THREADS, 0, stream>>>(y, b, M, N);
    else bias_gelu_kernel<1><<<grid, THREADS, 0, stream>>>(y, b, M, N);
    return (int)cudaGetLastError();
}
""",
    functions=[
        "int linear_gelu_forward(const float* x, const float* w, const float* b, float* y, int M, int N, int K, "
        "cudaStream_t stream)"
    ],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        K = self.linear.in_features
        N = self.linear.out_features
        M = x.numel() // K
        y = torch.empty((*x.shape[:-1], N), dtype=x.dtype, device=x.device)
        err = _lib.linear_gelu_forward(x, self.linear.weight, self.linear.bias, y, M, N, K)
        if err:
            raise RuntimeError(f"linear_gelu failed: error {err} (>= 10000: cuBLAS status + 10000)")
        return y
