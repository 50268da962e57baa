"""C = A @ B with a hand-written fp32 SGEMM: 128x128x8 block tiles, 8x8 per thread, double-buffered shared memory."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

#define BM 128
#define BN 128
#define BK 8
#define APAD 4      // As rows are BM + APAD floats: conflict-free transposed stores, float4 reads stay aligned
#define THREADS 256

// Row-major C[M,N] = A[M,K] @ B[K,N], plain fp32 FMAs (no tensor cores).
// 256 threads as a 16x16 grid; thread (ty, tx) owns rows {ty*4..ty*4+3, 64+ty*4..64+ty*4+3} and
// columns {tx*4..tx*4+3, 64+tx*4..64+tx*4+3} of the 128x128 block tile. A warp covers 4 ty x 8 tx,
// so each k step reads 4 distinct A and 8 distinct B float4 per warp (conflict-free, broadcast).
// CHECK=false needs M % 128 == 0, N % 128 == 0, K % 8 == 0 and 16-byte aligned pointers.
template <bool CHECK>
__global__ void __launch_bounds__(THREADS, 2)
sgemm_kernel(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(16) float As[2][BK][BM + APAD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int ty = ((tid >> 6) << 2) | ((tid >> 3) & 3);  // (warp / 2) * 4 + lane / 8
    const int tx = (((tid >> 5) & 1) << 3) | (tid & 7);   // (warp % 2) * 8 + lane % 8
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    // Global -> shared mapping. A tile (128 rows x 8 k): row tid/2, k (tid%2)*4..+3.
    // B tile (8 k x 128 cols): k tid/32, cols (tid%32)*4..+3.
    const int a_row = tid >> 1;
    const int a_col = (tid & 1) << 2;
    const int b_row = tid >> 5;
    const int b_col = (tid & 31) << 2;

    float ra[4], rb[4];
    // Fast-path base pointers (advanced by k0 and k0 * N); the checked path indexes explicitly.
    const float* a_base = A + (int64_t)(m0 + a_row) * K + a_col;
    const float* b_base = B + (int64_t)b_row * N + n0 + b_col;

    auto load_tiles = [&](int k0) {
        if (!CHECK) {
            float4 va = *reinterpret_cast<const float4*>(a_base + k0);
            float4 vb = *reinterpret_cast<const float4*>(b_base + (int64_t)k0 * N);
            ra[0] = va.x; ra[1] = va.y; ra[2] = va.z; ra[3] = va.w;
            rb[0] = vb.x; rb[1] = vb.y; rb[2] = vb.z; rb[3] = vb.w;
        } else {
            const int r = m0 + a_row;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = k0 + a_col + i;
                ra[i] = (r < M && c < K) ? A[(int64_t)r * K + c] : 0.0f;
            }
            const int kr = k0 + b_row;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int c = n0 + b_col + i;
                rb[i] = (kr < K && c < N) ? B[(int64_t)kr * N + c] : 0.0f;
            }
        }
    };
    auto store_tiles = [&](int buf) {
#pragma unroll
        for (int i = 0; i < 4; ++i) As[buf][a_col + i][a_row] = ra[i];
        *reinterpret_cast<float4*>(&Bs[buf][b_row][b_col]) = make_float4(rb[0], rb[1], rb[2], rb[3]);
    };

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    const int ktiles = (K + BK - 1) / BK;
    load_tiles(0);
    store_tiles(0);
    __syncthreads();

    for (int t = 0; t < ktiles; ++t) {
        const int cur = t & 1;
        const bool has_next = (t + 1) < ktiles;
        if (has_next) load_tiles((t + 1) * BK);  // global loads in flight during the FMAs below
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[cur][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[cur][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[cur][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[cur][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        // Buffer cur^1 was last read in iteration t-1, which every thread finished before the
        // barrier that ended it, so it can be overwritten now.
        if (has_next) store_tiles(cur ^ 1);
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = n0 + h * 64 + tx * 4;
            if (!CHECK) {
                *reinterpret_cast<float4*>(C + (int64_t)r * N + c) =
                    make_float4(acc[i][h * 4 + 0], acc[i][h * 4 + 1], acc[i][h * 4 + 2], acc[i][h * 4 + 3]);
            } else if (r < M) {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (c + j < N) C[(int64_t)r * N + c + j] = acc[i][h * 4 + j];
            }
        }
    }
}

__global__ void zero_kernel(float* __restrict__ C, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) C[i] = 0.0f;
}

extern "C" int matmul_forward(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream) {
    if (M <= 0 || N <= 0) return 0;
    if (K <= 0) {
        int64_t n = (int64_t)M * N;
        int blocks = (int)((n + 255) / 256);
        if (blocks > 132 * 16) blocks = 132 * 16;
        zero_kernel<<<blocks, 256, 0, stream>>>(C, n);
        return (int)cudaGetLastError();
    }
    dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
    bool aligned = ((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) |
                     reinterpret_cast<uintptr_t>(C)) & 15) == 0;
    if (aligned && M % BM == 0 && N % BN == 0 && K % BK == 0)
        sgemm_kernel<false><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
    else
        sgemm_kernel<true><<<grid, THREADS, 0, stream>>>(A, B, C, M, N, K);
    return (int)cudaGetLastError();
}
""",
    functions=["int matmul_forward(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        err = _lib.matmul_forward(a, b, c, M, N, K)
        if err:
            raise RuntimeError(f"matmul kernel launch failed: CUDA error {err}")
        return c
