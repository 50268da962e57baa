"""sigmoid((x + bias) * scale) in one fused kernel: a thread owns a float4 column slice (bias loaded once) over 4 rows."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

#define THREADS 256
#define RPB 4  // rows per thread per grid step, loads issued together

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

// grid.x covers the columns (V per thread), grid.y strides over groups of RPB rows.
template <int V>
__global__ void __launch_bounds__(THREADS) bias_scale_sigmoid_kernel(const float* __restrict__ x,
                                                                     const float* __restrict__ bias,
                                                                     float* __restrict__ y, int rows, int cols,
                                                                     float scale) {
    const int nv = cols / V;
    const int cv = blockIdx.x * THREADS + threadIdx.x;
    if (cv >= nv) return;
    float b[V];
    ld<V>(bias + (int64_t)cv * V, b);
    for (int64_t r0 = (int64_t)blockIdx.y * RPB; r0 < rows; r0 += (int64_t)gridDim.y * RPB) {
        float v[RPB][V];
#pragma unroll
        for (int u = 0; u < RPB; ++u)
            if (r0 + u < rows) ld<V>(x + (r0 + u) * cols + (int64_t)cv * V, v[u]);
#pragma unroll
        for (int u = 0; u < RPB; ++u) {
            if (r0 + u < rows) {
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float t = (v[u][j] + b[j]) * scale;
                    v[u][j] = 1.0f / (1.0f + expf(-t));
                }
                st<V>(y + (r0 + u) * cols + (int64_t)cv * V, v[u]);
            }
        }
    }
}

extern "C" int bias_scale_sigmoid_forward(const float* x, const float* bias, float* y, int rows, int cols, float scale,
                                          cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) |
                           reinterpret_cast<uintptr_t>(bias);
    const bool vec = (cols % 4 == 0) && (addr & 15) == 0;
    const int nv = vec ? cols / 4 : cols;
    int64_t gy = ((int64_t)rows + RPB - 1) / RPB;
    if (gy > 65535) gy = 65535;
    dim3 grid((nv + THREADS - 1) / THREADS, (unsigned)gy);
    if (vec) bias_scale_sigmoid_kernel<4><<<grid, THREADS, 0, stream>>>(x, bias, y, rows, cols, scale);
    else bias_scale_sigmoid_kernel<1><<<grid, THREADS, 0, stream>>>(x, bias, y, rows, cols, scale);
    return (int)cudaGetLastError();
}
""",
    functions=[
        "int bias_scale_sigmoid_forward(const float* x, const float* bias, float* y, int rows, int cols, float scale, "
        "cudaStream_t stream)"
    ],
)


class ModelNew(nn.Module):
    def __init__(self, dim, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.5)
        self.scale = scale

    def forward(self, x):
        cols = self.bias.numel()
        rows = x.numel() // cols
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        err = _lib.bias_scale_sigmoid_forward(x, self.bias, y, rows, cols, float(self.scale))
        if err:
            raise RuntimeError(f"bias_scale_sigmoid kernel launch failed: CUDA error {err}")
        return y
