"""TEMPORARY variant benchmark (to be deleted)."""
import ast
import os
import sys
import types

try:
    import gymnasium  # noqa: F401
except ImportError:
    _g = types.ModuleType("gymnasium")
    _ge = types.ModuleType("gymnasium.envs")
    _gr = types.ModuleType("gymnasium.envs.registration")
    _gr.register = lambda *a, **k: None
    _gr.registry = {}
    sys.modules.update({"gymnasium": _g, "gymnasium.envs": _ge, "gymnasium.envs.registration": _gr})

import torch
import torch.nn.functional as F

from cuda_gym.native import load_kernels

ROOT = os.path.dirname(os.path.abspath(__file__))


def cuda_src(rel):
    tree = ast.parse(open(os.path.join(ROOT, rel)).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load_kernels":
            return ast.literal_eval({k.arg: k.value for k in node.keywords}["cuda"])


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


GELU = r"""
#include <cuda_runtime.h>
#include <cstdint>
__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }
template <int T, int U>
__global__ void __launch_bounds__(T) k(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t base = (int64_t)blockIdx.x * (T * U) + threadIdx.x;
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { int64_t i = base + (int64_t)u * T; if (i < n4) v[u] = __ldcs(x + i); }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        int64_t i = base + (int64_t)u * T;
        if (i < n4) { float4 r; r.x = gelu(v[u].x); r.y = gelu(v[u].y); r.z = gelu(v[u].z); r.w = gelu(v[u].w); __stcs(y + i, r); }
    }
}
template <int T, int U>
__global__ void __launch_bounds__(T) kn(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    int64_t base = (int64_t)blockIdx.x * (T * U) + threadIdx.x;
    float4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) { int64_t i = base + (int64_t)u * T; if (i < n4) v[u] = x[i]; }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        int64_t i = base + (int64_t)u * T;
        if (i < n4) { float4 r; r.x = gelu(v[u].x); r.y = gelu(v[u].y); r.z = gelu(v[u].z); r.w = gelu(v[u].w); y[i] = r; }
    }
}
template <int T, int U, bool CS> static void L(const float* x, float* y, int64_t n4, cudaStream_t s) {
    int64_t b = (n4 + T * U - 1) / (T * U);
    if (CS) k<T, U><<<(unsigned)b, T, 0, s>>>((const float4*)x, (float4*)y, n4);
    else kn<T, U><<<(unsigned)b, T, 0, s>>>((const float4*)x, (float4*)y, n4);
}
extern "C" int gelu_v(const float* x, float* y, int64_t n, int v, cudaStream_t s) {
    int64_t n4 = n / 4;
    switch (v) {
        case 0: L<128, 1, false>(x, y, n4, s); break;
        case 1: L<256, 1, false>(x, y, n4, s); break;
        case 2: L<256, 2, false>(x, y, n4, s); break;
        case 3: L<256, 4, false>(x, y, n4, s); break;
        case 4: L<512, 2, false>(x, y, n4, s); break;
        case 5: L<128, 4, false>(x, y, n4, s); break;
        case 6: L<256, 1, true>(x, y, n4, s); break;
        case 7: L<256, 4, true>(x, y, n4, s); break;
        case 8: L<128, 2, false>(x, y, n4, s); break;
    }
    return (int)cudaGetLastError();
}
"""

SOFTMAX_EXTRA = r"""
extern "C" int sm_v(const float* x, float* y, int rows, int cols, int threads, int online, cudaStream_t s) {
    size_t bytes = (size_t)cols * 4;
    if (!online) {
        cudaFuncSetAttribute(softmax_cached_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        softmax_cached_kernel<4><<<rows, threads, bytes, s>>>(x, y, cols);
    } else {
        softmax_online_kernel<4><<<rows, threads, 0, s>>>(x, y, cols);
    }
    return (int)cudaGetLastError();
}
"""

LN_EXTRA = r"""
extern "C" int ln_v(const float* x, const float* w, const float* b, float* y, int rows, int cols, int threads, int cached, cudaStream_t s) {
    size_t bytes = (size_t)cols * 4;
    if (cached) {
        cudaFuncSetAttribute(layer_norm_kernel<4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
        layer_norm_kernel<4, true><<<rows, threads, bytes, s>>>(x, w, b, y, cols, 1e-5f);
    } else {
        layer_norm_kernel<4, false><<<rows, threads, 0, s>>>(x, w, b, y, cols, 1e-5f);
    }
    return (int)cudaGetLastError();
}
"""

SUM_EXTRA = r"""
extern "C" int sum_v(const float* x, float* y, int rows, int cols, int threads, cudaStream_t s) {
    sum_rows_block_kernel<4><<<rows, threads, 0, s>>>(x, y, cols);
    return (int)cudaGetLastError();
}
"""


def main():
    print(torch.cuda.get_device_name(), flush=True)
    # ---- gelu
    lib = load_kernels(cuda=GELU, functions=["int gelu_v(const float* x, float* y, int64_t n, int v, cudaStream_t s)"])
    x = torch.randn(8192, 8192, device="cuda")
    y = torch.empty_like(x)
    ref = F.gelu(x)
    print(f"gelu torch {bench(lambda: F.gelu(x)):.4f}")
    for v in range(9):
        t = bench(lambda: lib.gelu_v(x, y, x.numel(), v))
        print(f"gelu v{v} {t:.4f} ok={torch.equal(y, ref)}", flush=True)
    del x, y, ref
    # ---- softmax
    lib = load_kernels(cuda=cuda_src("L1/softmax.py") + SOFTMAX_EXTRA,
                       functions=["int sm_v(const float* x, float* y, int rows, int cols, int threads, int online, cudaStream_t s)"])
    x = torch.randn(4096, 16384, device="cuda")
    y = torch.empty_like(x)
    ref = torch.softmax(x, -1)
    print(f"softmax torch {bench(lambda: torch.softmax(x, -1)):.4f}")
    for online in (0, 1):
        for th in (256, 512, 1024):
            t = bench(lambda: lib.sm_v(x, y, 4096, 16384, th, online))
            print(f"softmax online={online} th={th} {t:.4f} err={(y - ref).abs().max().item():.2e}", flush=True)
    del x, y, ref
    # ---- layer norm
    lib = load_kernels(cuda=cuda_src("L1/layer_norm.py") + LN_EXTRA,
                       functions=["int ln_v(const float* x, const float* w, const float* b, float* y, int rows, int cols, int threads, int cached, cudaStream_t s)"])
    x = torch.randn(8192, 8192, device="cuda")
    w = torch.rand(8192, device="cuda") + 0.5
    b = torch.rand(8192, device="cuda") - 0.5
    y = torch.empty_like(x)
    ref = F.layer_norm(x, (8192,), w, b, 1e-5)
    print(f"layernorm torch {bench(lambda: F.layer_norm(x, (8192,), w, b, 1e-5)):.4f}")
    for cached in (1, 0):
        for th in (256, 512, 1024):
            t = bench(lambda: lib.ln_v(x, w, b, y, 8192, 8192, th, cached))
            print(f"layernorm cached={cached} th={th} {t:.4f} err={(y - ref).abs().max().item():.2e}", flush=True)
    del x, y, ref
    # ---- sum
    lib = load_kernels(cuda=cuda_src("L1/sum_dim.py") + SUM_EXTRA,
                       functions=["int sum_v(const float* x, float* y, int rows, int cols, int threads, cudaStream_t s)"])
    x = torch.randn(8192, 16384, device="cuda")
    y = torch.empty(8192, device="cuda")
    print(f"sum torch {bench(lambda: x.sum(-1)):.4f}")
    for th in (128, 256, 512, 1024):
        t = bench(lambda: lib.sum_v(x, y, 8192, 16384, th))
        print(f"sum th={th} {t:.4f}", flush=True)
    c = torch.empty_like(x)
    print(f"copy 512MB->512MB {bench(lambda: c.copy_(x)):.4f}")


if __name__ == "__main__":
    main()
