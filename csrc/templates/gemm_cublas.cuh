// Template: cuBLAS SGEMM (fp32, default math mode: no TF32) followed by the epilogue in one pass (CUDA).
//
// Same contract as gemm.cuh's cg_gemm (C[(b*M + m)*N + n] = E(sum_k A*B, index)), for operands whose
// strides cuBLAS can express: in each of A and B one of the two matrix strides is 1 and the other is at
// least the matching extent. The product is written by cublasSgemmStridedBatched, then an elementwise
// pass applies E in place (skipped when the epilogue is the identity). Link with -lcublas.
//
// Knobs: EPI_BLOCK (threads of the epilogue pass) in {128, 256, 512, 1024}.
// Returns 0, a CUDA error code, or 10000 + a cuBLAS status.
#pragma once
#include "common.h"
#include <cublas_v2.h>

static cublasHandle_t cg_cublas_handle() {
    static cublasHandle_t handle = nullptr;
    if (handle == nullptr && cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) handle = nullptr;
    return handle;
}

template <int EPI_BLOCK, bool IDENTITY_EPILOGUE, class E>
int cg_gemm_cublas(const float* A, const float* B, float* C, int64_t batch, int64_t M, int64_t N, int64_t K,
                   int64_t sAb, int64_t sAm, int64_t sAk, int64_t sBb, int64_t sBk, int64_t sBn, const E& e,
                   cudaStream_t stream) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    cublasHandle_t h = cg_cublas_handle();
    if (h == nullptr) return 10000 + (int)CUBLAS_STATUS_NOT_INITIALIZED;
    cublasStatus_t s = cublasSetStream(h, stream);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    // Row-major C[M,N] = A[M,K] B[K,N] is column-major C^T[N,M] = B^T[N,K] A^T[K,M].
    // Column-major B^T (N x K): element (n, k) at n*sBn + k*sBk.
    const bool b_n_unit = sBn == 1;
    const cublasOperation_t opB = b_n_unit ? CUBLAS_OP_N : CUBLAS_OP_T;
    const int64_t ldb = b_n_unit ? sBk : sBn;
    const bool a_k_unit = sAk == 1;
    const cublasOperation_t opA = a_k_unit ? CUBLAS_OP_N : CUBLAS_OP_T;
    const int64_t lda = a_k_unit ? sAm : sAk;
    const float alpha = 1.f, beta = 0.f;
    s = cublasSgemmStridedBatched(h, opB, opA, (int)N, (int)M, (int)K, &alpha, B, (int)ldb, (long long)sBb, A, (int)lda,
                                  (long long)sAb, &beta, C, (int)N, (long long)(M * N), (int)batch);
    if (s != CUBLAS_STATUS_SUCCESS) return 10000 + (int)s;
    if (!IDENTITY_EPILOGUE) cg_epilogue_in_place<EPI_BLOCK>(C, batch * M * N, e, stream);
    return (int)cudaGetLastError();
}
