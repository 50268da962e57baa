// Template: tiled GEMM with a fused epilogue (CUDA).
//
// Computes, for every batch b < batch, row m < M and column n < N,
//   C[(b * M + m) * N + n] = E(sum_k A[b*sAb + m*sAm + k*sAk] * B[b*sBb + k*sBk + n*sBn], (b * M + m) * N + n)
// in fp32 (FFMA, no TF32). A and B are read through element strides, so transposed operands, nn.Linear's
// weight (B = W^T: sBk = 1, sBn = K) and broadcast batches (stride 0) need no copy. C is contiguous.
// The epilogue E (bias, scaling, activations, residual adds, ...) runs on the accumulators in registers
// before the single store. Contract: `CG_FN float operator()(float v, int64_t index) const`.
//
// Each block computes a BM x BN tile of C, staging BK-deep slices of A and B in shared memory; each of its
// (BM/TM) * (BN/TN) threads accumulates a TM x TN sub-tile (rows tm + i*BM/TM, columns tn + j*BN/TN, so
// stores of a warp are contiguous along n).
//
// Knobs (template parameters): BM, BN in {32, 64, 128}; BK in {8, 16, 32}; TM, TN in {4, 8}.
// Every combination is valid (threads per block = (BM/TM)*(BN/TN), from 16 to 1024).
#pragma once
#include "common.h"

template <int BM, int BN, int BK, int TM, int TN, bool A_K_CONTIG, bool B_N_CONTIG, class E>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
cg_gemm_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int64_t M, int64_t N,
               int64_t K, int64_t sAb, int64_t sAm, int64_t sAk, int64_t sBb, int64_t sBk, int64_t sBn, E e) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int RSTEP = BM / TM, CSTEP = BN / TN;
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int64_t b = blockIdx.z, m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * BN;
    const float* Ab = A + b * sAb;
    const float* Bb = B + b * sBb;
    const int tid = threadIdx.x, tm = tid / CSTEP, tn = tid % CSTEP;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        for (int idx = tid; idx < BM * BK; idx += THREADS) {
            const int mm = A_K_CONTIG ? idx / BK : idx % BM, kk = A_K_CONTIG ? idx % BK : idx / BM;
            const int64_t gm = m0 + mm, gk = k0 + kk;
            As[kk][mm] = (gm < M && gk < K) ? Ab[gm * sAm + gk * sAk] : 0.f;
        }
        for (int idx = tid; idx < BN * BK; idx += THREADS) {
            const int nn = B_N_CONTIG ? idx % BN : idx / BK, kk = B_N_CONTIG ? idx / BN : idx % BK;
            const int64_t gn = n0 + nn, gk = k0 + kk;
            Bs[kk][nn] = (gn < N && gk < K) ? Bb[gk * sBk + gn * sBn] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], bv[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[kk][tm + i * RSTEP];
#pragma unroll
            for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tn + j * CSTEP];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int64_t m = m0 + tm + i * RSTEP;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int64_t n = n0 + tn + j * CSTEP;
            if (n < N) {
                const int64_t index = (b * M + m) * N + n;
                C[index] = e(acc[i][j], index);
            }
        }
    }
}

// Returns 0 or a CUDA error code.
template <int BM, int BN, int BK, int TM, int TN, class E>
int cg_gemm(const float* A, const float* B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K, int64_t sAb,
            int64_t sAm, int64_t sAk, int64_t sBb, int64_t sBk, int64_t sBn, const E& e, cudaStream_t stream) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    if (batch > 65535 || (N + BN - 1) / BN > 65535 || (M + BM - 1) / BM > 2147483647LL)
        return (int)cudaErrorInvalidConfiguration;
    const dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((N + BN - 1) / BN), (unsigned)batch);
    constexpr int THREADS = (BM / TM) * (BN / TN);
    const bool ak = sAk == 1, bn = sBn == 1;
    if (ak && bn)
        cg_gemm_kernel<BM, BN, BK, TM, TN, true, true, E><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K, sAb, sAm, sAk, sBb, sBk, sBn, e);
    else if (ak)
        cg_gemm_kernel<BM, BN, BK, TM, TN, true, false, E><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K, sAb, sAm, sAk, sBb, sBk, sBn, e);
    else if (bn)
        cg_gemm_kernel<BM, BN, BK, TM, TN, false, true, E><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K, sAb, sAm, sAk, sBb, sBk, sBn, e);
    else
        cg_gemm_kernel<BM, BN, BK, TM, TN, false, false, E><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K, sAb, sAm, sAk, sBb, sBk, sBn, e);
    return (int)cudaGetLastError();
}
