// Template: fused elementwise chain (C++ twin for the CPU backend).
//
// Computes y[i] = F(i) for 0 <= i < n with the functor contract of elementwise.cuh (`run<V>`),
// OpenMP threads over chunks of GRAIN elements, V values per functor call (the compiler vectorises the
// inner loop over V-wide groups).
//
// Knobs (template parameters):
//   GRAIN  elements per OpenMP chunk  1024, 4096, 16384, 65536
//   V      values per functor call    1, 4, 8, 16
#pragma once
#include "common.h"
#include <omp.h>

template <int GRAIN, int V, class F>
int cg_elementwise(float* y, int64_t n, const F& f) {
    if (n <= 0) return 0;
    const int64_t chunks = (n + GRAIN - 1) / GRAIN;
    #pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t start = c * GRAIN, stop = start + GRAIN < n ? start + GRAIN : n;
        int64_t i = start;
        for (; i + V <= stop; i += V) {
            float out[V];
            f.template run<V>(i, out);
            for (int j = 0; j < V; ++j) y[i + j] = out[j];
        }
        for (; i < stop; ++i) {
            float one[1];
            f.template run<1>(i, one);
            y[i] = one[0];
        }
    }
    return 0;
}
