"""Inclusive cumsum over the last dim: one block per row, chunked block-wide scan (thread/warp-shuffle/warp-sums levels) with a running carry."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
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

// The row is processed in chunks of blockDim.x * V consecutive elements; thread t owns elements
// [t*V, t*V+V) of a chunk. Per chunk: serial scan of the thread's V values, warp inclusive scan of
// thread totals (shuffles), scan of the warp totals by warp 0, plus the carry of previous chunks.
// The next chunk is prefetched into registers while the current one is scanned.
template <int V>
__global__ void __launch_bounds__(512) cumsum_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float wsum[2][32];  // double-buffered by chunk parity: 2 barriers per chunk suffice
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    float* yr = y + row * cols;
    const int nv = cols / V;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int chunk = blockDim.x;
    const int nchunks = (nv + chunk - 1) / chunk;

    float nxt[V];
#pragma unroll
    for (int j = 0; j < V; ++j) nxt[j] = 0.0f;
    if (tid < nv) ld<V>(xr + (int64_t)tid * V, nxt);

    float carry = 0.0f;
    for (int c = 0; c < nchunks; ++c) {
        const int i = c * chunk + tid;
        float r[V];
#pragma unroll
        for (int j = 0; j < V; ++j) r[j] = nxt[j];
        {
            const int inext = i + chunk;
#pragma unroll
            for (int j = 0; j < V; ++j) nxt[j] = 0.0f;
            if (inext < nv) ld<V>(xr + (int64_t)inext * V, nxt);
        }
#pragma unroll
        for (int j = 1; j < V; ++j) r[j] += r[j - 1];
        const float total = r[V - 1];

        float incl = total;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float n = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += n;
        }
        float excl = __shfl_up_sync(0xffffffffu, incl, 1);
        if (lane == 0) excl = 0.0f;

        float* ws = wsum[c & 1];
        if (lane == 31) ws[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            float w = lane < nw ? ws[lane] : 0.0f;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const float n = __shfl_up_sync(0xffffffffu, w, o);
                if (lane >= o) w += n;
            }
            if (lane < nw) ws[lane] = w;  // inclusive scan of warp totals
        }
        __syncthreads();

        const float prefix = (carry + (warp > 0 ? ws[warp - 1] : 0.0f)) + excl;
        if (i < nv) {
#pragma unroll
            for (int j = 0; j < V; ++j) r[j] += prefix;
            st<V>(yr + (int64_t)i * V, r);
        }
        carry += ws[nw - 1];
    }
}

extern "C" int cumsum_forward(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    const bool vec = (cols % 4 == 0) &&
                     (((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0);
    const int nv = vec ? cols / 4 : cols;
    int threads = (nv + 31) / 32 * 32;
    if (threads > 512) threads = 512;
    if (vec) cumsum_kernel<4><<<rows, threads, 0, stream>>>(x, y, cols);
    else cumsum_kernel<1><<<rows, threads, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
""",
    functions=["int cumsum_forward(const float* x, float* y, int rows, int cols, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        cols = x.shape[-1]
        rows = x.numel() // cols if cols > 0 else 0
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        err = _lib.cumsum_forward(x, y, rows, cols)
        if err:
            raise RuntimeError(f"cumsum kernel launch failed: CUDA error {err}")
        return y
