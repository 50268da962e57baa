"""LayerNorm(x + y): one block per row, the residual sum cached in shared memory, exact two-pass mean/variance, fused affine."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>
#include <math.h>

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
// blockDim.x a multiple of 32; every thread gets the sum; `red` may be reused by the next call.
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}

// CACHED: s = x + y lives in dynamic shared memory (x and y are read from HBM once);
// otherwise (very long rows) s is recomputed from global memory in every pass.
template <int V, bool CACHED>
__global__ void __launch_bounds__(512) add_layer_norm_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                                             const float* __restrict__ w, const float* __restrict__ b,
                                                             float* __restrict__ out, int cols, float eps) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    const float* yr = y + row * cols;
    float* outr = out + row * cols;
    const int nv = cols / V;

    auto load_sum = [&](int i, float (&r)[V]) {
        if (CACHED) {
            ld<V>(srow + i * V, r);
        } else {
            float t[V];
            ld<V>(xr + (int64_t)i * V, r);
            ld<V>(yr + (int64_t)i * V, t);
#pragma unroll
            for (int j = 0; j < V; ++j) r[j] += t[j];
        }
    };

    float s = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V], t[V];
        ld<V>(xr + (int64_t)i * V, r);
        ld<V>(yr + (int64_t)i * V, t);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            r[j] += t[j];
            s += r[j];
        }
        if (CACHED) st<V>(srow + i * V, r);
    }
    const float mean = block_sum(s, red) / (float)cols;

    // Each thread re-reads only the shared elements it wrote itself: no barrier needed for srow.
    float q = 0.0f;
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        load_sum(i, r);
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
        load_sum(i, r);
        ld<V>(w + (int64_t)i * V, wv);
        ld<V>(b + (int64_t)i * V, bv);
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = (r[j] - mean) * rstd * wv[j] + bv[j];
        st<V>(outr + (int64_t)i * V, r);
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
static int launch(const float* x, const float* y, const float* w, const float* b, float* out, int rows, int cols,
                  float eps, cudaStream_t stream) {
    const int nv = cols / V;
    int threads = ((nv + 3) / 4 + 31) / 32 * 32;
    if (threads < 32) threads = 32;
    if (threads > 512) threads = 512;
    const size_t bytes = (size_t)cols * sizeof(float);
    size_t cap = (size_t)(smem_optin_limit() - 1024);
    if (cap > (size_t)(112 * 1024)) cap = 112 * 1024;
    if (bytes <= cap) {
        if (bytes > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(add_layer_norm_kernel<V, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
            if (e != cudaSuccess) return (int)e;
        }
        add_layer_norm_kernel<V, true><<<rows, threads, bytes, stream>>>(x, y, w, b, out, cols, eps);
    } else {
        add_layer_norm_kernel<V, false><<<rows, threads, 0, stream>>>(x, y, w, b, out, cols, eps);
    }
    return (int)cudaGetLastError();
}

extern "C" int add_layer_norm_forward(const float* x, const float* y, const float* w, const float* b, float* out,
                                      int rows, int cols, float eps, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(b) |
                           reinterpret_cast<uintptr_t>(out);
    const bool vec = (cols % 4 == 0) && (addr & 15) == 0;
    return vec ? launch<4>(x, y, w, b, out, rows, cols, eps, stream)
               : launch<1>(x, y, w, b, out, rows, cols, eps, stream);
}
""",
    functions=[
        "int add_layer_norm_forward(const float* x, const float* y, const float* w, const float* b, float* out, "
        "int rows, int cols, float eps, cudaStream_t stream)"
    ],
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x, y):
        cols = self.norm.weight.numel()
        rows = x.numel() // cols
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
        err = _lib.add_layer_norm_forward(x, y, self.norm.weight, self.norm.bias, out, rows, cols, float(self.norm.eps))
        if err:
            raise RuntimeError(f"residual layer_norm kernel launch failed: CUDA error {err}")
        return out
