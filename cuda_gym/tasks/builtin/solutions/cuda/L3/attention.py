"""Self-attention: fp32 cuBLAS SGEMMs (projections, batched QK^T and PV) with own kernels for the q/k/v bias, the scaled softmax and the output bias."""
import math

import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cstdint>
#include <math.h>

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

// y_z[r, c] += b_z[c] in place for up to three matrices (blockIdx.z picks one), all [rows, cols].
template <int V>
__global__ void __launch_bounds__(THREADS) bias_add_kernel(float* __restrict__ y0, float* __restrict__ y1,
                                                           float* __restrict__ y2, const float* __restrict__ b0,
                                                           const float* __restrict__ b1, const float* __restrict__ b2,
                                                           int rows, int cols) {
    float* y = blockIdx.z == 0 ? y0 : (blockIdx.z == 1 ? y1 : y2);
    const float* b = blockIdx.z == 0 ? b0 : (blockIdx.z == 1 ? b1 : b2);
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
                for (int j = 0; j < V; ++j) v[u][j] += bv[j];
                st<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
            }
        }
    }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_max(lane < nw ? red[lane] : -INFINITY);
}

// In place: p[row, :] = softmax(p[row, :] / div). One block per row; CACHED keeps the row in shared memory.
template <int V, bool CACHED>
__global__ void __launch_bounds__(512) scaled_softmax_kernel(float* __restrict__ p, int cols, float div) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    float* pr = p + (int64_t)blockIdx.x * cols;
    const int nv = cols / V;

    float m = -INFINITY;
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        ld<V>(pr + (int64_t)i * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            r[j] = r[j] / div;
            m = fmaxf(m, r[j]);
        }
        if (CACHED) st<V>(srow + i * V, r);
    }
    m = block_max(m, red);

    // Each thread re-reads only the elements it wrote itself (shared or global): no barrier needed.
    float s = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        if (CACHED) {
            ld<V>(srow + i * V, r);
        } else {
            ld<V>(pr + (int64_t)i * V, r);
#pragma unroll
            for (int j = 0; j < V; ++j) r[j] = r[j] / div;
        }
#pragma unroll
        for (int j = 0; j < V; ++j) {
            r[j] = expf(r[j] - m);
            s += r[j];
        }
        if (CACHED) st<V>(srow + i * V, r);
        else st<V>(pr + (int64_t)i * V, r);  // unnormalized exp, scaled below
    }
    const float inv = 1.0f / block_sum(s, red);

    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        if (CACHED) ld<V>(srow + i * V, r);
        else ld<V>(pr + (int64_t)i * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] *= inv;
        st<V>(pr + (int64_t)i * V, r);
    }
}

static int smem_optin_limit() {
    static int limit = -1;
    if (limit < 0) {
        int dev = 0;
        cudaGetDevice(&dev);
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || v <= 0) v = 48 * 1024;
        limit = v;
    }
    return limit;
}

template <int V>
static int softmax_rows(float* p, int64_t rows, int cols, float div, cudaStream_t stream) {
    const int nv = cols / V;
    int threads = ((nv + 3) / 4 + 31) / 32 * 32;
    if (threads < 32) threads = 32;
    if (threads > 512) threads = 512;
    const size_t bytes = (size_t)cols * sizeof(float);
    size_t cap = (size_t)(smem_optin_limit() - 1024);
    if (cap > (size_t)(112 * 1024)) cap = 112 * 1024;
    if (bytes <= cap) {
        if (bytes > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(scaled_softmax_kernel<V, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
            if (e != cudaSuccess) return (int)e;
        }
        scaled_softmax_kernel<V, true><<<(unsigned)rows, threads, bytes, stream>>>(p, cols, div);
    } else {
        scaled_softmax_kernel<V, false><<<(unsigned)rows, threads, 0, stream>>>(p, cols, div);
    }
    return (int)cudaGetLastError();
}

static int bias_add3(float* y0, float* y1, float* y2, const float* b0, const float* b1, const float* b2, int nmat,
                     int64_t rows, int cols, cudaStream_t stream) {
    const uintptr_t addr = reinterpret_cast<uintptr_t>(y0) | reinterpret_cast<uintptr_t>(y1) |
                           reinterpret_cast<uintptr_t>(y2) | reinterpret_cast<uintptr_t>(b0) |
                           reinterpret_cast<uintptr_t>(b1) | reinterpret_cast<uintptr_t>(b2);
    const bool vec = (cols % 4 == 0) && (addr & 15) == 0;
    const int nv = vec ? cols / 4 : cols;
    int64_t gy = (rows + RPB - 1) / RPB;
    if (gy > 65535) gy = 65535;
    dim3 grid((nv + THREADS - 1) / THREADS, (unsigned)gy, nmat);
    if (vec) bias_add_kernel<4><<<grid, THREADS, 0, stream>>>(y0, y1, y2, b0, b1, b2, (int)rows, cols);
    else bias_add_kernel<1><<<grid, THREADS, 0, stream>>>(y0, y1, y2, b0, b1, b2, (int)rows, cols);
    return (int)cudaGetLastError();
}

static cublasHandle_t get_handle() {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
    return handle;
}

// Row-major y[M,N] = x[M,K] @ w[N,K]^T  <=>  column-major y^T[N,M] = (w^T as KxN)^T * x^T[K,M].
static cublasStatus_t linear(cublasHandle_t h, const float* x, const float* w, float* y, int M, int N, int K) {
    const float alpha = 1.0f, beta = 0.0f;
    return cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, K, x, K, &beta, y, N);
}

// x: [B, S, D]; q, k, v, ctx: [B, S, D] workspaces; scores: [B, S, S] workspace; out: [B, S, D].
// Returns 0, a CUDA error code, or 10000 + a cuBLAS status.
extern "C" int attention_forward(const float* x, const float* wq, const float* bq, const float* wk, const float* bk,
                                 const float* wv, const float* bv, const float* wo, const float* bo, float* q, float* k,
                                 float* v, float* scores, float* ctx, float* out, int B, int S, int D, float div,
                                 cudaStream_t stream) {
    if (B <= 0 || S <= 0 || D <= 0) return 0;
    cublasHandle_t h = get_handle();
    if (h == nullptr) return 10000 + (int)CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = cublasSetStream(h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    const int M = B * S;
    int e;

    if ((s = linear(h, x, wq, q, M, D, D)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    if ((s = linear(h, x, wk, k, M, D, D)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    if ((s = linear(h, x, wv, v, M, D, D)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    if ((e = bias_add3(q, k, v, bq, bk, bv, 3, M, D, stream)) != 0) return e;

    const float one = 1.0f, zero = 0.0f;
    // scores[b] = q[b] @ k[b]^T (row-major [S, S])  <=>  column-major scores^T = k[b] (op T) * q[b]^T.
    s = cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, S, S, D, &one, k, D, (long long)S * D, q, D,
                                  (long long)S * D, &zero, scores, S, (long long)S * S, B);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;

    const bool vec = (S % 4 == 0) && (reinterpret_cast<uintptr_t>(scores) & 15) == 0;
    e = vec ? softmax_rows<4>(scores, (int64_t)B * S, S, div, stream) : softmax_rows<1>(scores, (int64_t)B * S, S, div, stream);
    if (e != 0) return e;

    // ctx[b] = P[b] @ v[b] (row-major [S, D])  <=>  column-major ctx^T = v[b]^T * P[b]^T.
    s = cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, D, S, S, &one, v, D, (long long)S * D, scores, S,
                                  (long long)S * S, &zero, ctx, D, (long long)S * D, B);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;

    if ((s = linear(h, ctx, wo, out, M, D, D)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    return bias_add3(out, out, out, bo, bo, bo, 1, M, D, stream);
}
""",
    functions=[
        "int attention_forward(const float* x, const float* wq, const float* bq, const float* wk, const float* bk, "
        "const float* wv, const float* bv, const float* wo, const float* bo, float* q, float* k, float* v, "
        "float* scores, float* ctx, float* out, int B, int S, int D, float div, cudaStream_t stream)"
    ],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.normal_(proj.weight, std=dim ** -0.5)

    def forward(self, x):
        B, S, D = x.shape
        opts = dict(dtype=x.dtype, device=x.device)
        q = torch.empty((B, S, D), **opts)
        k = torch.empty((B, S, D), **opts)
        v = torch.empty((B, S, D), **opts)
        ctx = torch.empty((B, S, D), **opts)
        scores = torch.empty((B, S, S), **opts)
        out = torch.empty((B, S, D), **opts)
        err = _lib.attention_forward(
            x, self.q_proj.weight, self.q_proj.bias, self.k_proj.weight, self.k_proj.bias, self.v_proj.weight,
            self.v_proj.bias, self.out_proj.weight, self.out_proj.bias, q, k, v, scores, ctx, out, B, S, D,
            float(math.sqrt(D)),
        )
        if err:
            raise RuntimeError(f"attention failed: error {err} (>= 10000: cuBLAS status + 10000)")
        return out
