// Template: blocked GEMM with a fused epilogue (C++ twin for the CPU backend).
//
// Same contract as gemm.cuh's cg_gemm: C[(b*M + m)*N + n] = E(sum_k A[b*sAb + m*sAm + k*sAk] *
// B[b*sBb + k*sBk + n*sBn], index), fp32. B's KC x NC panel is packed contiguous per thread, then each
// row of A's MC-row block streams over it with a vectorisable inner loop over n; the epilogue runs on
// each finished row of a tile while it is in cache.
//
// Knobs (template parameters): MC (rows per tile) in {8, 16, 32, 64}; NC (columns per tile) in
// {64, 128, 256, 512}; KC (depth per packed panel) in {64, 128, 256, 512}.
#pragma once
#include "common.h"
#include <omp.h>
#include <vector>

template <int MC, int NC, int KC, class E>
int cg_gemm(const float* A, const float* B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t sAb,
            int64_t sAm, int64_t sAk, int64_t sBb, int64_t sBk, int64_t sBn, const E& e) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    const int64_t tm = (M + MC - 1) / MC, tn = (N + NC - 1) / NC;
    #pragma omp parallel
    {
        std::vector<float> panel((size_t)KC * NC);
        float acc[NC];
        #pragma omp for collapse(3) schedule(dynamic)
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t ti = 0; ti < tm; ++ti)
                for (int64_t tj = 0; tj < tn; ++tj) {
                    const int64_t i0 = ti * MC, i1 = i0 + MC < M ? i0 + MC : M;
                    const int64_t j0 = tj * NC, nj = (j0 + NC < N ? j0 + NC : N) - j0;
                    const float* Ab = A + b * sAb;
                    const float* Bb = B + b * sBb;
                    float* Cb = C + b * M * N;
                    for (int64_t i = i0; i < i1; ++i)
                        for (int64_t j = 0; j < nj; ++j) Cb[i * N + j0 + j] = 0.f;
                    for (int64_t k0 = 0; k0 < K; k0 += KC) {
                        const int64_t kc = k0 + KC < K ? KC : K - k0;
                        for (int64_t k = 0; k < kc; ++k)
                            for (int64_t j = 0; j < nj; ++j) panel[k * NC + j] = Bb[(k0 + k) * sBk + (j0 + j) * sBn];
                        for (int64_t i = i0; i < i1; ++i) {
                            for (int64_t j = 0; j < nj; ++j) acc[j] = Cb[i * N + j0 + j];
                            for (int64_t k = 0; k < kc; ++k) {
                                const float a = Ab[i * sAm + (k0 + k) * sAk];
                                const float* pk = panel.data() + k * NC;
                                #pragma omp simd
                                for (int64_t j = 0; j < nj; ++j) acc[j] += a * pk[j];
                            }
                            for (int64_t j = 0; j < nj; ++j) Cb[i * N + j0 + j] = acc[j];
                        }
                    }
                    for (int64_t i = i0; i < i1; ++i)
                        for (int64_t j = 0; j < nj; ++j) {
                            const int64_t index = (b * M + i) * N + j0 + j;
                            Cb[i * N + j0 + j] = e(Cb[i * N + j0 + j], index);
                        }
                }
    }
    return 0;
}
