"""Pre-norm FFN block: own LayerNorm kernel, fp32 cuBLAS SGEMMs, fused in-place bias+GELU and bias+residual epilogue kernels."""
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

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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

// LayerNorm of one row per block, exact two-pass statistics. CACHED keeps the row in shared memory.
template <int V, bool CACHED>
__global__ void __launch_bounds__(512) layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                         const float* __restrict__ b, float* __restrict__ y,
                                                         int cols, float eps) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const int nv = cols / V;
    const float* src = CACHED ? srow : xr;

    float s = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        ld<V>(xr + (int64_t)i * V, r);
        if (CACHED) st<V>(srow + i * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) s += r[j];
    }
    const float mean = block_sum(s, red) / (float)cols;

    // Each thread re-reads only what it wrote itself, so no barrier is needed for srow.
    float q = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        ld<V>(src + (int64_t)i * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float d = r[j] - mean;
            q = fmaf(d, d, q);
        }
    }
    const float var = block_sum(q, red) / (float)cols;
    const float rstd = 1.0f / sqrtf(var + eps);

    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V], wv[V], bv[V];
        ld<V>(src + (int64_t)i * V, r);
        ld<V>(w + (int64_t)i * V, wv);
        ld<V>(b + (int64_t)i * V, bv);
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = (r[j] - mean) * rstd * wv[j] + bv[j];
        st<V>(yr + (int64_t)i * V, r);
    }
}

// In place y[r, c] = act(y[r, c] + b[c]) (GELU) or y[r, c] = res[r, c] + (y[r, c] + b[c]) (RESIDUAL).
template <int V, bool RESIDUAL>
__global__ void __launch_bounds__(THREADS) epilogue_kernel(float* __restrict__ y, const float* __restrict__ b,
                                                           const float* __restrict__ res, int rows, int cols) {
    const int nv = cols / V;
    const int cv = blockIdx.x * THREADS + threadIdx.x;
    if (cv >= nv) return;
    float bv[V];
    ld<V>(b + (int64_t)cv * V, bv);
    for (int64_t r0 = (int64_t)blockIdx.y * RPB; r0 < rows; r0 += (int64_t)gridDim.y * RPB) {
        float v[RPB][V], rv[RPB][V];
#pragma unroll
        for (int u = 0; u < RPB; ++u) {
            if (r0 + u < rows) {
                ld<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
                if (RESIDUAL) ld<V>(res + (r0 + u) * cols + (int64_t)cv * V, rv[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < RPB; ++u) {
            if (r0 + u < rows) {
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float t = v[u][j] + bv[j];
                    v[u][j] = RESIDUAL ? rv[u][j] + t : 0.5f * t * (1.0f + erff(t * 0.70710678118654752f));
                }
                st<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
            }
        }
    }
}

template <bool RESIDUAL>
static int epilogue(float* y, const float* b, const float* res, int rows, int cols, cudaStream_t stream) {
    uintptr_t addr = reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(b);
    if (RESIDUAL) addr |= reinterpret_cast<uintptr_t>(res);
    const bool vec = (cols % 4 == 0) && (addr & 15) == 0;
    const int nv = vec ? cols / 4 : cols;
    int64_t gy = ((int64_t)rows + RPB - 1) / RPB;
    if (gy > 65535) gy = 65535;
    dim3 grid((nv + THREADS - 1) / THREADS, (unsigned)gy);
    if (vec) epilogue_kernel<4, RESIDUAL><<<grid, THREADS, 0, stream>>>(y, b, res, rows, cols);
    else epilogue_kernel<1, RESIDUAL><<<grid, THREADS, 0, stream>>>(y, b, res, rows, cols);
    return (int)cudaGetLastError();
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
static int layer_norm(const float* x, const float* w, const float* b, float* y, int rows, int cols, float eps,
                      cudaStream_t stream) {
    const int nv = cols / V;
    int threads = ((nv + 3) / 4 + 31) / 32 * 32;
    if (threads < 32) threads = 32;
    if (threads > 512) threads = 512;
    const size_t bytes = (size_t)cols * sizeof(float);
    size_t cap = (size_t)(smem_optin_limit() - 1024);
    if (cap > (size_t)(112 * 1024)) cap = 112 * 1024;
    if (bytes <= cap) {
        if (bytes > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(layer_norm_kernel<V, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
            if (e != cudaSuccess) return (int)e;
        }
        layer_norm_kernel<V, true><<<rows, threads, bytes, stream>>>(x, w, b, y, cols, eps);
    } else {
        layer_norm_kernel<V, false><<<rows, threads, 0, stream>>>(x, w, b, y, cols, eps);
    }
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

// xn: [T, D] and hid: [T, Hd] workspaces. Returns 0, a CUDA error code, or 10000 + a cuBLAS status.
extern "C" int ffn_residual_forward(const float* x, const float* ln_w, const float* ln_b, const float* w1,
                                    const float* b1, const float* w2, const float* b2, float* xn, float* hid,
                                    float* out, int T, int D, int Hd, float eps, cudaStream_t stream) {
    if (T <= 0 || D <= 0) return 0;
    cublasHandle_t h = get_handle();
    if (h == nullptr) return 10000 + (int)CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = cublasSetStream(h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    int e;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(ln_w) |
                           reinterpret_cast<uintptr_t>(ln_b) | reinterpret_cast<uintptr_t>(xn);
    const bool vec = (D % 4 == 0) && (addr & 15) == 0;
    e = vec ? layer_norm<4>(x, ln_w, ln_b, xn, T, D, eps, stream) : layer_norm<1>(x, ln_w, ln_b, xn, T, D, eps, stream);
    if (e != 0) return e;
    if ((s = linear(h, xn, w1, hid, T, Hd, D)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    if ((e = epilogue<false>(hid, b1, nullptr, T, Hd, stream)) != 0) return e;
    if ((s = linear(h, hid, w2, out, T, D, Hd)) != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    return epilogue<true>(out, b2, x, T, D, stream);
}
""",
    functions=[
        "int ffn_residual_forward(const float* x, const float* ln_w, const float* ln_b, const float* w1, "
        "const float* b1, const float* w2, const float* b2, float* xn, float* hid, float* out, int T, int D, int Hd, "
        "float eps, cudaStream_t stream)"
    ],
    extra_ldflags=["-lcublas"],
)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        D, Hd = self.fc1.in_features, self.fc1.out_features
        T = x.numel() // D
        opts = dict(dtype=x.dtype, device=x.device)
        xn = torch.empty((T, D), **opts)
        hid = torch.empty((T, Hd), **opts)
        out = torch.empty(x.shape, **opts)
        err = _lib.ffn_residual_forward(
            x, self.norm.weight, self.norm.bias, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias,
            xn, hid, out, T, D, Hd, float(self.norm.eps),
        )
        if err:
            raise RuntimeError(f"ffn_residual failed: error {err} (>= 10000: cuBLAS status + 10000)")
        return out
