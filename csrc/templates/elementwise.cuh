// Template: fused elementwise chain (CUDA).
//
// Computes y[i] = F(i) for 0 <= i < n, where F is a functor generated per task that loads every
// operand it needs (the chain's inputs, broadcast parameters, constants) and applies the whole chain
// of pointwise ops in registers: one read of each input and one write of y, whatever the chain's length.
//
// Functor contract: `template <int V> CG_FN void run(int64_t i, float (&out)[V]) const` writes
// F(i), ..., F(i + V - 1); it is called with V > 1 only at i % V == 0 and when the launcher was told
// that all contiguous operands are 4*V-byte aligned.
//
// Knobs (template parameters):
//   BLOCK  threads per block          32, 64, 128, 256, 512, 1024
//   ITEMS  vectors per thread per pass 1, 2, 4, 8   (independent loads in flight)
//   V      vector width (floats)      1, 2, 4      (falls back to 1 when operands are not aligned)
#pragma once
#include "common.h"

template <int BLOCK, int ITEMS, int V, class F>
__global__ void __launch_bounds__(BLOCK) cg_elementwise_kernel(float* __restrict__ y, int64_t n, F f) {
    const int64_t per_block = (int64_t)BLOCK * ITEMS * V;
    for (int64_t base = (int64_t)blockIdx.x * per_block; base < n; base += (int64_t)gridDim.x * per_block) {
        float out[ITEMS][V];
#pragma unroll
        for (int u = 0; u < ITEMS; ++u) {
            const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * V;
            if (i + V <= n) f.template run<V>(i, out[u]);
        }
#pragma unroll
        for (int u = 0; u < ITEMS; ++u) {
            const int64_t i = base + ((int64_t)u * BLOCK + threadIdx.x) * V;
            if (i + V <= n) {
                cg_store<V>(y + i, out[u]);
            } else {
                for (int64_t j = i; j < n; ++j) {
                    float one[1];
                    f.template run<1>(j, one);
                    y[j] = one[0];
                }
            }
        }
    }
}

// Returns 0 or a CUDA error code.
template <int BLOCK, int ITEMS, int V, class F>
int cg_elementwise(float* y, int64_t n, const F& f, bool aligned, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (V > 1 && !aligned) return cg_elementwise<BLOCK, ITEMS, 1, F>(y, n, f, true, stream);
    const int64_t per_block = (int64_t)BLOCK * ITEMS * V;
    int64_t blocks = (n + per_block - 1) / per_block;
    if (blocks > (1LL << 30)) blocks = 1LL << 30;
    cg_elementwise_kernel<BLOCK, ITEMS, V, F><<<(unsigned)blocks, BLOCK, 0, stream>>>(y, n, f);
    return (int)cudaGetLastError();
}
