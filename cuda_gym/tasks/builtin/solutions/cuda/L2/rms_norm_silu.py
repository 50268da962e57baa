"""silu(x / rms(x) * weight): one block per row, row cached in shared memory, mean of squares by block reduction, fused SiLU."""
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
__device__ __forceinline__ float block_sum(float v, float* red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    return warp_sum(lane < nw ? red[lane] : 0.0f);
}

// CACHED: the row lives in dynamic shared memory (one HBM read); otherwise it is re-read from global.
template <int V, bool CACHED>
__global__ void __launch_bounds__(512) rms_norm_silu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                            float* __restrict__ y, int cols, float eps) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const int nv = cols / V;

    float s = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V];
        ld<V>(xr + (int64_t)i * V, r);
        if (CACHED) st<V>(srow + i * V, r);
#pragma unroll
        for (int j = 0; j < V; ++j) s = fmaf(r[j], r[j], s);
    }
    const float rms = sqrtf(block_sum(s, red) / (float)cols + eps);

    // Each thread re-reads only the shared elements it wrote itself: no barrier needed for srow.
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
        float r[V], wv[V];
        if (CACHED) ld<V>(srow + i * V, r);
        else ld<V>(xr + (int64_t)i * V, r);
        ld<V>(w + (int64_t)i * V, wv);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const float v = r[j] / rms * wv[j];
            r[j] = v / (1.0f + expf(-v));
        }
        st<V>(yr + (int64_t)i * V, r);
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
static int launch(const float* x, const float* w, float* y, int rows, int cols, float eps, cudaStream_t stream) {
    const int nv = cols / V;
    int threads = ((nv + 3) / 4 + 31) / 32 * 32;
    if (threads < 32) threads = 32;
    if (threads > 512) threads = 512;
    const size_t bytes = (size_t)cols * sizeof(float);
    size_t cap = (size_t)(smem_optin_limit() - 1024);
    if (cap > (size_t)(112 * 1024)) cap = 112 * 1024;
    if (bytes <= cap) {
        if (bytes > 48 * 1024) {
            cudaError_t e = cudaFuncSetAttribute(rms_norm_silu_kernel<V, true>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
            if (e != cudaSuccess) return (int)e;
        }
        rms_norm_silu_kernel<V, true><<<rows, threads, bytes, stream>>>(x, w, y, cols, eps);
    } else {
        rms_norm_silu_kernel<V, false><<<rows, threads, 0, stream>>>(x, w, y, cols, eps);
    }
    return (int)cudaGetLastError();
}

extern "C" int rms_norm_silu_forward(const float* x, const float* w, float* y, int rows, int cols, float eps,
                                     cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(w);
    const bool vec = (cols % 4 == 0) && (addr & 15) == 0;
    return vec ? launch<4>(x, w, y, rows, cols, eps, stream) : launch<1>(x, w, y, rows, cols, eps, stream);
}
""",
    functions=[
        "int rms_norm_silu_forward(const float* x, const float* w, float* y, int rows, int cols, float eps, "
        "cudaStream_t stream)"
    ],
)


class ModelNew(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)
        self.eps = eps

    def forward(self, x):
        cols = self.weight.numel()
        rows = x.numel() // cols
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        err = _lib.rms_norm_silu_forward(x, self.weight, y, rows, cols, float(self.eps))
        if err:
            raise RuntimeError(f"rms_norm_silu kernel launch failed: CUDA error {err}")
        return y
