"""C = A @ B with a packed, cache-blocked, register-tiled SGEMM parallelized over C tiles with OpenMP."""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>

// Packed, register-blocked SGEMM C[M,N] (+)= A[M,K] * B[K,N]; A and B are read through element strides.
// B is packed into NR-column panels and A into MR-row panels per KC-deep block (zero padded); the
// 6x32 micro-kernel keeps 12 vector accumulators in registers. Threads own MC x NC tiles of C and call
// epi(c_row, i, j0, j1) on each finished tile row while it is still in cache.
typedef float vf16 __attribute__((vector_size(64)));
constexpr int MR = 6, NR = 32;
constexpr int64_t KC = 256;

// Grow-only, 64-byte aligned scratch kept across calls (declare it static thread_local), so big
// buffers are not page-faulted in again on every call.
struct Scratch {
    float* p = nullptr;
    int64_t cap = 0;
    ~Scratch() { std::free(p); }
    float* get(int64_t n) {
        if (n > cap) {
            std::free(p);
            p = static_cast<float*>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64));
            cap = n;
        }
        return p;
    }
};

static void micro_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, bool acc_c,
                         int mr, int nr) {
    vf16 acc[MR][2] = {};
    for (int64_t k = 0; k < kc; ++k) {
        vf16 b0 = *(const vf16*)(b + k * NR), b1 = *(const vf16*)(b + k * NR + 16);
#pragma GCC unroll 6
        for (int i = 0; i < MR; ++i) {
            float ai = a[k * MR + i];
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; ++i) {
            float* ci = c + i * ldc;
            if (acc_c) {
                vf16 c0, c1;
                std::memcpy(&c0, ci, 64); std::memcpy(&c1, ci + 16, 64);
                acc[i][0] += c0; acc[i][1] += c1;
            }
            std::memcpy(ci, &acc[i][0], 64); std::memcpy(ci + 16, &acc[i][1], 64);
        }
    } else {
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j) c[i * ldc + j] = (acc_c ? c[i * ldc + j] : 0.f) + acc[i][j / 16][j % 16];
    }
}

// Pack B (element (k, n) at B[k*sbk + n*sbn]) into ws: K x roundup(N, NR) floats.
static float* pack_b(const float* B, int64_t sbk, int64_t sbn, int64_t K, int64_t N, Scratch& ws) {
    const int64_t Np = (N + NR - 1) / NR * NR, nk = (K + KC - 1) / KC;
    float* Bp = ws.get(Np * K);
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t p = 0; p < nk; ++p)
        for (int64_t jp = 0; jp < Np / NR; ++jp) {
            const int64_t pc = p * KC, kc = std::min(KC, K - pc);
            float* dst = Bp + pc * Np + jp * kc * NR;
            for (int64_t k = 0; k < kc; ++k)
                for (int j = 0; j < NR; ++j) {
                    const int64_t n = jp * NR + j;
                    dst[k * NR + j] = n < N ? B[(pc + k) * sbk + n * sbn] : 0.f;
                }
        }
    return Bp;
}

// C = (acc_c ? C : 0) + A * B with B pre-packed by pack_b; A element (i, k) at A[i*sam + k*sak].
template <class Epi>
static void gemm_packed(int64_t M, int64_t N, int64_t K, const float* A, int64_t sam, int64_t sak,
                        const float* Bp, float* C, int64_t ldc, bool acc_c, Epi epi) {
    const int64_t Mp = (M + MR - 1) / MR * MR, Np = (N + NR - 1) / NR * NR, nk = (K + KC - 1) / KC;
    int64_t mc = 16 * MR, nc = 4 * NR;  // shrink tiles until every thread has about two of them
    const int64_t want = 2 * omp_get_max_threads();
    while (((M + mc - 1) / mc) * ((N + nc - 1) / nc) < want) {
        if (nc > NR && nc >= mc) nc /= 2;
        else if (mc > MR) mc = std::max<int64_t>(MR, mc / 2 / MR * MR);
        else break;
    }
    const int64_t tm = (M + mc - 1) / mc, tn = (N + nc - 1) / nc;
    static thread_local Scratch ws_a;
    float* Ap = ws_a.get(Mp * K);
    #pragma omp parallel
    {
        #pragma omp for collapse(2) schedule(static)
        for (int64_t p = 0; p < nk; ++p)
            for (int64_t ip = 0; ip < Mp / MR; ++ip) {
                const int64_t pc = p * KC, kc = std::min(KC, K - pc);
                float* dst = Ap + pc * Mp + ip * kc * MR;
                for (int i = 0; i < MR; ++i) {
                    const int64_t r = ip * MR + i;
                    for (int64_t k = 0; k < kc; ++k) dst[k * MR + i] = r < M ? A[r * sam + (pc + k) * sak] : 0.f;
                }
            }
        #pragma omp for collapse(2) schedule(dynamic)
        for (int64_t ti = 0; ti < tm; ++ti)
            for (int64_t tj = 0; tj < tn; ++tj) {
                const int64_t i0 = ti * mc, i1 = std::min(M, i0 + mc), j0 = tj * nc, j1 = std::min(N, j0 + nc);
                for (int64_t pc = 0; pc < K; pc += KC) {
                    const int64_t kc = std::min(KC, K - pc);
                    for (int64_t jr = j0; jr < j1; jr += NR)
                        for (int64_t ir = i0; ir < i1; ir += MR)
                            micro_kernel(kc, Ap + pc * Mp + ir * kc, Bp + pc * Np + jr * kc, C + ir * ldc + jr, ldc,
                                         acc_c || pc > 0, (int)std::min<int64_t>(MR, i1 - ir),
                                         (int)std::min<int64_t>(NR, j1 - jr));
                }
                for (int64_t i = i0; i < i1; ++i) epi(C + i * ldc, i, j0, j1);
            }
    }
}

template <class Epi>
static void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t sam, int64_t sak,
                 const float* B, int64_t sbk, int64_t sbn, float* C, int64_t ldc, Epi epi) {
    static thread_local Scratch ws_b;
    gemm_packed(M, N, K, A, sam, sak, pack_b(B, sbk, sbn, K, N, ws_b), C, ldc, false, epi);
}

extern "C" void matmul_forward(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K) {
    gemm(M, N, K, a, K, 1, b, N, 1, c, N, [](float*, int64_t, int64_t, int64_t) {});
}
""",
    functions=["void matmul_forward(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, dtype=a.dtype, device=a.device)
        _lib.matmul_forward(a, b, c, M, N, K)
        return c
