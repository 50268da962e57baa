// cuda_gym template library: shared math and memory helpers, for CUDA (nvcc) and the CPU (g++).
//
// Every template in this folder includes this file. It defines CG_FN (a device function under nvcc,
// an inline function under g++; usable on member functions too) and the scalar functions the generated epilogues call, each
// matching the PyTorch op named beside it in fp32 (exact GELU uses erff, as torch does).
#pragma once
#include <cstdint>
#include <cmath>
#include <initializer_list>
#include <math.h>

#ifdef __CUDACC__
#include <cuda_runtime.h>
#define CG_FN __device__ __forceinline__
#else
#define CG_FN inline
#endif

CG_FN float cg_relu(float x) { return x > 0.f ? x : 0.f; }                                   // F.relu
CG_FN float cg_leaky_relu(float x, float slope) { return x > 0.f ? x : x * slope; }          // F.leaky_relu
CG_FN float cg_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }                           // torch.sigmoid
CG_FN float cg_silu(float x) { return x / (1.f + expf(-x)); }                                // F.silu
CG_FN float cg_gelu(float x) { return 0.5f * x * (1.f + erff(x * 0.70710678118654752f)); }   // F.gelu
CG_FN float cg_gelu_tanh(float x) {                                                          // F.gelu(approximate="tanh")
    return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
CG_FN float cg_softplus(float x, float beta, float threshold) {                              // F.softplus
    return x * beta > threshold ? x : log1pf(expf(x * beta)) / beta;
}
CG_FN float cg_mish(float x) { return x * tanhf(cg_softplus(x, 1.f, 20.f)); }                // F.mish
CG_FN float cg_elu(float x, float alpha) { return x > 0.f ? x : alpha * expm1f(x); }         // F.elu
CG_FN float cg_selu(float x) {                                                               // torch.selu
    return 1.0507009873554804934f * (x > 0.f ? x : 1.6732632423543772848f * expm1f(x));
}
CG_FN float cg_hardsigmoid(float x) { return fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }        // F.hardsigmoid
CG_FN float cg_hardswish(float x) { return x * fminf(fmaxf(x + 3.f, 0.f), 6.f) / 6.f; }      // F.hardswish
CG_FN float cg_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }        // clamp / hardtanh
CG_FN float cg_softsign(float x) { return x / (1.f + fabsf(x)); }                            // F.softsign
CG_FN float cg_max(float a, float b) { return (a != a || a > b) ? a : b; }                   // torch.maximum (NaN wins)
CG_FN float cg_min(float a, float b) { return (a != a || a < b) ? a : b; }                   // torch.minimum (NaN wins)

// V consecutive floats at p (p must be 4*V-byte aligned when V > 1).
template <int V> CG_FN void cg_load(const float* p, float (&r)[V]) {
#ifdef __CUDACC__
    if constexpr (V == 4) {
        const float4 t = *reinterpret_cast<const float4*>(p);
        r[0] = t.x; r[1] = t.y; r[2] = t.z; r[3] = t.w;
        return;
    } else if constexpr (V == 2) {
        const float2 t = *reinterpret_cast<const float2*>(p);
        r[0] = t.x; r[1] = t.y;
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < V; ++j) r[j] = p[j];
}
template <int V> CG_FN void cg_store(float* p, const float (&r)[V]) {
#ifdef __CUDACC__
    if constexpr (V == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(r[0], r[1], r[2], r[3]);
        return;
    } else if constexpr (V == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(r[0], r[1]);
        return;
    }
#endif
#pragma unroll
    for (int j = 0; j < V; ++j) p[j] = r[j];
}

// True when every address is aligned to `bytes`.
static inline bool cg_aligned(std::initializer_list<const void*> ptrs, int bytes) {
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % (uintptr_t)bytes) return false;
    return true;
}

#ifdef __CUDACC__
// y[i] = E(y[i], i) in place over n elements: the epilogue pass after a library call (cuBLAS, cuDNN).
template <int BLOCK, class E>
__global__ void __launch_bounds__(BLOCK) cg_epilogue_kernel(float* __restrict__ y, int64_t n, E e) {
    for (int64_t i = (int64_t)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (int64_t)gridDim.x * BLOCK) y[i] = e(y[i], i);
}

template <int BLOCK, class E>
void cg_epilogue_in_place(float* y, int64_t n, const E& e, cudaStream_t stream) {
    int64_t blocks = (n + BLOCK - 1) / BLOCK;
    if (blocks > (1LL << 30)) blocks = 1LL << 30;
    cg_epilogue_kernel<BLOCK, E><<<(unsigned)blocks, BLOCK, 0, stream>>>(y, n, e);
}
#endif
