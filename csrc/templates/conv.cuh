// Templates: convolution (implicit GEMM), transposed convolution and pooling (CUDA), for 1, 2 or 3
// spatial dimensions (lower ranks pass extent 1, kernel 1, stride 1, padding 0 for the missing ones).
// Tensors are contiguous NC(D)(H)(W) fp32; y is written as y[index] = E(value, index) with the epilogue
// contract of the other templates (`CG_FN float operator()(float v, int64_t index) const`); a per-channel
// conv bias is an epilogue operand.
//
// CgConvShape: batch n, in channels c, out channels oc, groups, input extents (d, h, w), output extents
// (od, oh, ow), kernel (kd, kh, kw), stride, padding, dilation (each d, h, w).
//
// cg_conv<BM, BN, BK, TM, TN>: nn.Conv1d/2d/3d (any stride, padding, dilation, groups; padding_mode zeros).
//   Per group, a GEMM with rows m = (n, od, oh, ow), columns = the group's out channels and depth
//   k = (c, kd, kh, kw): the input patch (A) is gathered on the fly into shared memory (zero outside the
//   input), the weight [oc, c/groups, kd, kh, kw] is B. Threads own TM x TN sub-tiles with rows fastest,
//   so a warp's stores run along the output's spatial axis.
//   Knobs: BM, BN in {32, 64, 128}; BK in {8, 16, 32}; TM, TN in {4, 8} (all combinations valid:
//   16 to 1024 threads per block).
// cg_conv_direct<BLOCK>: the same convolution, one thread per output (for grouped convs with few out
//   channels per group, e.g. depthwise, where a GEMM tile would be mostly empty). Knobs: BLOCK in
//   {64, 128, 256, 512}.
// cg_conv_transpose<BLOCK>: nn.ConvTranspose1d/2d/3d (any stride, padding, output_padding, dilation,
//   groups; weight [c, oc/groups, kd, kh, kw]), one thread per output gathering the inputs that reach it.
//   Knobs: BLOCK in {64, 128, 256, 512}.
// cg_pool<BLOCK, IS_MAX, S>: max pooling (with dilation) or average pooling (count_include_pad as given;
//   ceil_mode is not supported), up to 4 neighbouring outputs per thread, blocks over one (n, c) plane at a time; S holds
//   the plane's geometry as compile-time constants. Knobs: BLOCK in {64, 128, 256, 512}.
#pragma once
#include "common.h"

struct CgConvShape {
    int64_t n, c, oc, groups;
    int64_t d, h, w, od, oh, ow;
    int64_t kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
};

// Sentinel coordinate of a padded tile row or depth slot: any sum with a valid coordinate stays < 0.
#define CG_CONV_OUTSIDE (-(1 << 29))

template <int BM, int BN, int BK, int TM, int TN, class E>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
cg_conv_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, CgConvShape s, E e) {
    constexpr int THREADS = (BM / TM) * (BN / TN);
    constexpr int RSTEP = BM / TM, CSTEP = BN / TN;
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    // The patch gather's index math, decomposed once instead of per loaded element: per tile row m
    // (n, oz, oy, ox) the input offset and corner (oz*sd - pd, ...), per depth slot k (c, kz, ky, kx)
    // the offset and dilated kernel position; an element is then x[row_off + k_off] when
    // 0 <= corner + kernel position < extent on each axis.
    __shared__ int64_t row_off[BM];
    __shared__ int row_z[BM], row_y[BM], row_x[BM];
    __shared__ int64_t k_off[BK];
    __shared__ int k_z[BK], k_y[BK], k_x[BK];
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups;
    const int64_t osp = s.od * s.oh * s.ow, ksp = s.kd * s.kh * s.kw, isp = s.d * s.h * s.w;
    const int64_t M = s.n * osp, K = cg * ksp;
    const int64_t g = blockIdx.z, m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * BN;
    const int tid = threadIdx.x, tm = tid % RSTEP, tn = tid / RSTEP;
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

    for (int mm = tid; mm < BM; mm += THREADS) {
        const int64_t m = m0 + mm;
        if (m < M) {
            const int64_t nb = m / osp, sp = m - nb * osp;
            const int64_t oz = sp / (s.oh * s.ow), oy = (sp / s.ow) % s.oh, ox = sp % s.ow;
            row_z[mm] = (int)(oz * s.sd - s.pd);
            row_y[mm] = (int)(oy * s.sh - s.ph);
            row_x[mm] = (int)(ox * s.sw - s.pw);
            row_off[mm] = (nb * s.c + g * cg) * isp + ((int64_t)row_z[mm] * s.h + row_y[mm]) * s.w + row_x[mm];
        } else {
            row_z[mm] = row_y[mm] = row_x[mm] = CG_CONV_OUTSIDE;
            row_off[mm] = 0;
        }
    }

    for (int64_t k0 = 0; k0 < K; k0 += BK) {
        for (int kk = tid; kk < BK; kk += THREADS) {
            const int64_t k = k0 + kk;
            if (k < K) {
                const int64_t c = k / ksp, kr = k - c * ksp;
                const int64_t kz = kr / (s.kh * s.kw), ky = (kr / s.kw) % s.kh, kx = kr % s.kw;
                k_z[kk] = (int)(kz * s.dd);
                k_y[kk] = (int)(ky * s.dh);
                k_x[kk] = (int)(kx * s.dw);
                k_off[kk] = c * isp + ((int64_t)k_z[kk] * s.h + k_y[kk]) * s.w + k_x[kk];
            } else {
                k_z[kk] = k_y[kk] = k_x[kk] = CG_CONV_OUTSIDE;
                k_off[kk] = 0;
            }
        }
        __syncthreads();
        for (int idx = tid; idx < BM * BK; idx += THREADS) {
            const int mm = idx % BM, kk = idx / BM;
            const int iz = row_z[mm] + k_z[kk], iy = row_y[mm] + k_y[kk], ix = row_x[mm] + k_x[kk];
            As[kk][mm] = (iz >= 0 && iz < s.d && iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
                ? x[row_off[mm] + k_off[kk]] : 0.f;
        }
        for (int idx = tid; idx < BN * BK; idx += THREADS) {
            const int kk = idx % BK, nn = idx / BK;
            const int64_t k = k0 + kk, o = n0 + nn;
            Bs[kk][nn] = (k < K && o < ocg) ? wt[(g * ocg + o) * K + k] : 0.f;
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
        const int64_t nb = m / osp, sp = m - nb * osp;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int64_t o = n0 + tn + j * CSTEP;
            if (o < ocg) {
                const int64_t index = (nb * s.oc + g * ocg + o) * osp + sp;
                y[index] = e(acc[i][j], index);
            }
        }
    }
}

template <int BM, int BN, int BK, int TM, int TN, class E>
int cg_conv(const float* x, const float* w, float* y, const CgConvShape& s, const E& e, cudaStream_t stream) {
    const int64_t M = s.n * s.od * s.oh * s.ow, ocg = s.oc / s.groups;
    if (M <= 0 || ocg <= 0) return 0;
    if (s.groups > 65535 || (ocg + BN - 1) / BN > 65535 || (M + BM - 1) / BM > 2147483647LL)
        return (int)cudaErrorInvalidConfiguration;
    const dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((ocg + BN - 1) / BN), (unsigned)s.groups);
    cg_conv_kernel<BM, BN, BK, TM, TN, E><<<grid, (BM / TM) * (BN / TN), 0, stream>>>(x, w, y, s, e);
    return (int)cudaGetLastError();
}

template <int BLOCK, class E>
__global__ void __launch_bounds__(BLOCK)
cg_conv_direct_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, CgConvShape s, E e) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups;
    const int64_t osp = s.od * s.oh * s.ow, isp = s.d * s.h * s.w, ksp = s.kd * s.kh * s.kw;
    const int64_t total = s.n * s.oc * osp;
    for (int64_t index = (int64_t)blockIdx.x * BLOCK + threadIdx.x; index < total; index += (int64_t)gridDim.x * BLOCK) {
        const int64_t sp = index % osp, o = (index / osp) % s.oc, nb = index / (osp * s.oc);
        const int64_t oz = sp / (s.oh * s.ow), oy = (sp / s.ow) % s.oh, ox = sp % s.ow;
        const int64_t g = o / ocg;
        float acc = 0.f;
        for (int64_t c = 0; c < cg; ++c) {
            const float* xp = x + (nb * s.c + g * cg + c) * isp;
            const float* wp = wt + (o * cg + c) * ksp;
            for (int64_t kz = 0; kz < s.kd; ++kz) {
                const int64_t iz = oz * s.sd - s.pd + kz * s.dd;
                if (iz < 0 || iz >= s.d) continue;
                for (int64_t ky = 0; ky < s.kh; ++ky) {
                    const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
                    if (iy < 0 || iy >= s.h) continue;
                    for (int64_t kx = 0; kx < s.kw; ++kx) {
                        const int64_t ix = ox * s.sw - s.pw + kx * s.dw;
                        if (ix >= 0 && ix < s.w) acc = fmaf(xp[(iz * s.h + iy) * s.w + ix], wp[(kz * s.kh + ky) * s.kw + kx], acc);
                    }
                }
            }
        }
        y[index] = e(acc, index);
    }
}

template <int BLOCK, class E>
int cg_conv_direct(const float* x, const float* w, float* y, const CgConvShape& s, const E& e, cudaStream_t stream) {
    const int64_t total = s.n * s.oc * s.od * s.oh * s.ow;
    if (total <= 0) return 0;
    int64_t blocks = (total + BLOCK - 1) / BLOCK;
    if (blocks > (1LL << 30)) blocks = 1LL << 30;
    cg_conv_direct_kernel<BLOCK, E><<<(unsigned)blocks, BLOCK, 0, stream>>>(x, w, y, s, e);
    return (int)cudaGetLastError();
}

// One axis of a transposed convolution's gather: output coordinate o receives kernel tap k from input
// i = (o + pad - k * dil) / stride when that division is exact. `first` starts at tap 0 with one
// division (once per output and axis); `next` moves to the following tap by subtraction, so the
// tap loops divide nothing.
struct CgTapAxis {
    int q, r;  // (o + pad - k * dil) = q * stride + r, 0 <= r < stride
    CG_FN void first(int64_t o, int64_t pad, int64_t stride) { q = (int)((o + pad) / stride); r = (int)((o + pad) % stride); }
    CG_FN void next(int dq, int dr, int stride) { q -= dq; r -= dr; if (r < 0) { r += stride; --q; } }
};

template <int BLOCK, class E>
__global__ void __launch_bounds__(BLOCK)
cg_conv_transpose_kernel(const float* __restrict__ x, const float* __restrict__ wt, float* __restrict__ y, CgConvShape s, E e) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups;
    const int64_t osp = s.od * s.oh * s.ow, isp = s.d * s.h * s.w, ksp = s.kd * s.kh * s.kw;
    const int64_t total = s.n * s.oc * osp;
    // dil = dq * stride + dr per axis: the tap step of CgTapAxis::next
    const int sd = (int)s.sd, sh = (int)s.sh, sw = (int)s.sw;
    const int dqz = (int)(s.dd / s.sd), drz = (int)(s.dd % s.sd), dqy = (int)(s.dh / s.sh), dry = (int)(s.dh % s.sh),
              dqx = (int)(s.dw / s.sw), drx = (int)(s.dw % s.sw);
    for (int64_t index = (int64_t)blockIdx.x * BLOCK + threadIdx.x; index < total; index += (int64_t)gridDim.x * BLOCK) {
        const int64_t sp = index % osp, o = (index / osp) % s.oc, nb = index / (osp * s.oc);
        const int64_t oz = sp / (s.oh * s.ow), oy = (sp / s.ow) % s.oh, ox = sp % s.ow;
        const int64_t g = o / ocg, og = o - g * ocg;
        const float* xb = x + (nb * s.c + g * cg) * isp;
        const float* wb = wt + (g * cg * ocg + og) * ksp;
        float acc = 0.f;
        CgTapAxis tz, ty0, tx0;
        tz.first(oz, s.pd, s.sd);
        ty0.first(oy, s.ph, s.sh);
        tx0.first(ox, s.pw, s.sw);
        for (int kz = 0; kz < s.kd; ++kz, tz.next(dqz, drz, sd)) {
            if (tz.r != 0 || tz.q < 0 || tz.q >= s.d) continue;
            CgTapAxis ty = ty0;
            for (int ky = 0; ky < s.kh; ++ky, ty.next(dqy, dry, sh)) {
                if (ty.r != 0 || ty.q < 0 || ty.q >= s.h) continue;
                CgTapAxis tx = tx0;
                for (int kx = 0; kx < s.kw; ++kx, tx.next(dqx, drx, sw)) {
                    if (tx.r != 0 || tx.q < 0 || tx.q >= s.w) continue;
                    const float* xp = xb + ((int64_t)tz.q * s.h + ty.q) * s.w + tx.q;
                    const float* wp = wb + ((int64_t)kz * s.kh + ky) * s.kw + kx;
                    for (int64_t c = 0; c < cg; ++c) acc = fmaf(xp[c * isp], wp[c * ocg * ksp], acc);
                }
            }
        }
        y[index] = e(acc, index);
    }
}

template <int BLOCK, class E>
int cg_conv_transpose(const float* x, const float* w, float* y, const CgConvShape& s, const E& e, cudaStream_t stream) {
    const int64_t total = s.n * s.oc * s.od * s.oh * s.ow;
    if (total <= 0) return 0;
    int64_t blocks = (total + BLOCK - 1) / BLOCK;
    if (blocks > (1LL << 30)) blocks = 1LL << 30;
    cg_conv_transpose_kernel<BLOCK, E><<<(unsigned)blocks, BLOCK, 0, stream>>>(x, w, y, s, e);
    return (int)cudaGetLastError();
}

// Pooling: s.c == s.oc channels, groups unused; count_include_pad selects the average's divisor.
// Blocks walk one (n, c) plane at a time (blockIdx.y), threads its outputs in order, so a warp reads
// neighbouring inputs. The plane's extents, window, strides, padding and dilation are compile-time
// constants of S (a struct the renderer writes: static constexpr int d, h, w, od, oh, ow, kd, kh, kw,
// sd, sh, sw, pd, ph, pw, dd, dh, dw), so the index divisions become multiplications and the taps
// unroll. (One thread per output with 64-bit divisions ran integer-bound: 0.10x vs torch.compile on
// a 3x3 average pool; with run-time 32-bit extents 0.29x; H200, session 11.)
// A thread computes PW neighbouring outputs of a row; with a stride of 1 or 2 their windows overlap,
// so it loads the input columns they share once per window row (stride-1 pools read each input kw
// times otherwise: 0.4-0.6x vs torch.compile with one output per thread, H200 session 11).
template <class S> struct CgPoolWork {
    static constexpr int PW = (S::sw <= 2 && S::ow >= 8) ? 4 : 1;
    static constexpr int GW = (S::ow + PW - 1) / PW;  // thread groups per output row
    static constexpr int groups = S::od * S::oh * GW;  // per plane
};

template <int BLOCK, bool IS_MAX, class S, class E>
__global__ void __launch_bounds__(BLOCK)
cg_pool_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t planes, bool count_include_pad, E e) {
    constexpr int PW = CgPoolWork<S>::PW, GW = CgPoolWork<S>::GW, groups = CgPoolWork<S>::groups;
    constexpr int SPAN = (PW - 1) * S::sw + (S::kw - 1) * S::dw + 1;
    constexpr int osp = S::od * S::oh * S::ow;
    constexpr int64_t isp = (int64_t)S::d * S::h * S::w;
    for (int64_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const float* xp = x + plane * isp;
        for (int g = blockIdx.x * BLOCK + threadIdx.x; g < groups; g += gridDim.x * BLOCK) {
            const int orow = g / GW, ox0 = (g - orow * GW) * PW;
            const int oz = orow / S::oh, oy = orow - oz * S::oh;
            const int z0 = oz * S::sd - S::pd, y0 = oy * S::sh - S::ph, x0 = ox0 * S::sw - S::pw;
            float acc[PW];
            int counted[PW];
#pragma unroll
            for (int q = 0; q < PW; ++q) { acc[q] = IS_MAX ? -INFINITY : 0.f; counted[q] = 0; }
#pragma unroll
            for (int kz = 0; kz < S::kd; ++kz) {
                const int iz = z0 + kz * S::dd;
                const bool z_in = iz >= 0 && iz < S::d;
#pragma unroll
                for (int ky = 0; ky < S::kh; ++ky) {
                    const int iy = y0 + ky * S::dh;
                    const bool zy_in = z_in && iy >= 0 && iy < S::h;
                    const float* xrow = xp + ((int64_t)iz * S::h + iy) * S::w;
                    float span[SPAN];
#pragma unroll
                    for (int t = 0; t < SPAN; ++t) {
                        const int ix = x0 + t;
                        span[t] = zy_in && ix >= 0 && ix < S::w ? __ldg(xrow + ix) : 0.f;
                    }
#pragma unroll
                    for (int q = 0; q < PW; ++q)
#pragma unroll
                        for (int kx = 0; kx < S::kw; ++kx) {
                            const int t = q * S::sw + kx * S::dw, ix = x0 + t;
                            if (zy_in && ix >= 0 && ix < S::w) {
                                if (IS_MAX) acc[q] = cg_max(acc[q], span[t]);
                                else { acc[q] += span[t]; ++counted[q]; }
                            }
                        }
                }
            }
#pragma unroll
            for (int q = 0; q < PW; ++q) {
                const int ox = ox0 + q;
                if (PW > 1 && ox >= S::ow) break;
                float v = acc[q];
                if (!IS_MAX) {
                    // With count_include_pad the divisor is the window clipped to the padded input, as torch does.
                    int div = counted[q];
                    if (count_include_pad) {
                        const int xq = ox * S::sw - S::pw;
                        const int z1 = min(z0 + S::kd, S::d + S::pd), y1 = min(y0 + S::kh, S::h + S::ph);
                        const int x1 = min(xq + S::kw, S::w + S::pw);
                        div = (z1 - z0) * (y1 - y0) * (x1 - xq);
                    }
                    v = div > 0 ? v / (float)div : 0.f;
                }
                const int64_t index = plane * osp + (int64_t)orow * S::ow + ox;
                y[index] = e(v, index);
            }
        }
    }
}

// S must describe s (the renderer writes both from the same shape); s gives the plane count.
template <int BLOCK, bool IS_MAX, class S, class E>
int cg_pool(const float* x, float* y, const CgConvShape& s, bool count_include_pad, const E& e, cudaStream_t stream) {
    const int64_t planes = s.n * s.c, osp = s.od * s.oh * s.ow;
    if (planes * osp <= 0) return 0;
    if (s.kd != S::kd || s.kh != S::kh || s.kw != S::kw || s.d != S::d || s.h != S::h || s.w != S::w || s.od != S::od ||
        s.oh != S::oh || s.ow != S::ow)
        return (int)cudaErrorInvalidValue;
    int64_t across = (CgPoolWork<S>::groups + BLOCK - 1) / BLOCK;
    if (across > (1LL << 20)) across = 1LL << 20;
    const int64_t down = planes < 65535 ? planes : 65535;
    cg_pool_kernel<BLOCK, IS_MAX, S, E><<<dim3((unsigned)across, (unsigned)down), BLOCK, 0, stream>>>(
        x, y, planes, count_include_pad, e);
    return (int)cudaGetLastError();
}
