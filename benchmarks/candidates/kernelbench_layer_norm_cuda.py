"""LayerNorm over the last dimension in KernelBench's load_inline form: one block per row, warp-shuffle reductions."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

layer_norm_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <cstdint>

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

// One row per block, exact two-pass mean and variance, fused affine. V: floats per load (4 when every
// pointer is 16-byte aligned and cols % 4 == 0). CACHED: the row lives in shared memory `srow` (one
// HBM read); otherwise it is re-read from global memory in each pass.
template <int V, bool CACHED>
__device__ __forceinline__ void layer_norm_row(const float* __restrict__ x, const float* __restrict__ w,
                                               const float* __restrict__ b, float* __restrict__ y, int cols,
                                               float eps, float* srow, float* red) {
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
    const float rstd = 1.0f / sqrtf(block_sum(q, red) / (float)cols + eps);

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

__global__ void __launch_bounds__(512) layer_norm_cached_vec4(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
        int cols, float eps) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    layer_norm_row<4, true>(x, w, b, y, cols, eps, srow, red);
}

__global__ void __launch_bounds__(512) layer_norm_cached_scalar(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
        int cols, float eps) {
    extern __shared__ __align__(16) float srow[];
    __shared__ float red[32];
    layer_norm_row<1, true>(x, w, b, y, cols, eps, srow, red);
}

__global__ void __launch_bounds__(512) layer_norm_global_vec4(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
        int cols, float eps) {
    __shared__ float red[32];
    layer_norm_row<4, false>(x, w, b, y, cols, eps, nullptr, red);
}

__global__ void __launch_bounds__(512) layer_norm_global_scalar(
        const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ b, float* __restrict__ y,
        int cols, float eps) {
    __shared__ float red[32];
    layer_norm_row<1, false>(x, w, b, y, cols, eps, nullptr, red);
}

// Dynamic shared memory above 48 KiB needs a per-kernel opt-in.
static void allow_shared_bytes(const void* kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return;
    TORCH_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) == cudaSuccess,
                "cudaFuncSetAttribute(MaxDynamicSharedMemorySize) failed for ", bytes, " bytes");
}

torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "layer_norm: expected a contiguous float32 CUDA tensor");
    TORCH_CHECK(weight.is_contiguous() && bias.is_contiguous() && weight.numel() == bias.numel() &&
                    weight.scalar_type() == torch::kFloat32 && bias.scalar_type() == torch::kFloat32,
                "layer_norm: weight and bias must be contiguous float32 tensors of one size");
    auto y = torch::empty_like(x);
    const int cols = (int)weight.numel();
    TORCH_CHECK(cols > 0 && x.size(-1) == cols, "layer_norm: the last dimension must match the weight");
    const int rows = (int)(x.numel() / cols);
    if (rows == 0) return y;

    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    const uintptr_t addr = reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(wp) |
                           reinterpret_cast<uintptr_t>(bp) | reinterpret_cast<uintptr_t>(yp);
    const bool vec = cols % 4 == 0 && (addr & 15) == 0;
    const int nv = vec ? cols / 4 : cols;
    int threads = ((nv + 3) / 4 + 31) / 32 * 32;  // about four loads per thread, 32 to 512 threads
    threads = std::max(32, std::min(512, threads));

    // Cache the row in shared memory when it fits (up to 112 KiB, leaving room for `red`).
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, x.get_device());
    const size_t bytes = (size_t)cols * sizeof(float);
    const size_t cap = std::min<size_t>(112 * 1024, optin > 1024 ? (size_t)(optin - 1024) : 47 * 1024);
    const bool cached = bytes <= cap;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const float e = (float)eps;
    if (cached && vec) {
        allow_shared_bytes((const void*)layer_norm_cached_vec4, bytes);
        layer_norm_cached_vec4<<<rows, threads, bytes, stream>>>(xp, wp, bp, yp, cols, e);
    } else if (cached) {
        allow_shared_bytes((const void*)layer_norm_cached_scalar, bytes);
        layer_norm_cached_scalar<<<rows, threads, bytes, stream>>>(xp, wp, bp, yp, cols, e);
    } else if (vec) {
        layer_norm_global_vec4<<<rows, threads, 0, stream>>>(xp, wp, bp, yp, cols, e);
    } else {
        layer_norm_global_scalar<<<rows, threads, 0, stream>>>(xp, wp, bp, yp, cols, e);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

layer_norm_cpp_source = (
    "torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"
)

layer_norm = load_inline(
    name="layer_norm_kernelbench_format",
    cpp_sources=layer_norm_cpp_source,
    cuda_sources=layer_norm_cuda_source,
    functions=["layer_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-5)

    def forward(self, x):
        return layer_norm.layer_norm_forward(x.contiguous(), self.norm.weight, self.norm.bias, self.norm.eps)
