// Templates: convolution, transposed convolution and pooling (C++ twin for the CPU backend).
//
// Same contracts as conv.cuh (CgConvShape, epilogue `float operator()(float v, int64_t index) const`),
// direct loops: OpenMP threads over (n, out channel) pairs; each computes its output plane by
// accumulating every (in channel, kernel offset) contribution with a vectorisable loop over the output
// row (conv), or by gathering per output (transposed conv, pooling).
//
// Knobs (template parameters): none beyond what conv.cuh's twins take; the CPU forms are fixed.
#pragma once
#include "common.h"
#include <omp.h>
#include <vector>

struct CgConvShape {
    int64_t n, c, oc, groups;
    int64_t d, h, w, od, oh, ow;
    int64_t kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
};

template <class E>
int cg_conv(const float* x, const float* wt, float* y, const CgConvShape& s, const E& e) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups;
    const int64_t osp = s.od * s.oh * s.ow, isp = s.d * s.h * s.w, ksp = s.kd * s.kh * s.kw;
    #pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t nb = 0; nb < s.n; ++nb)
        for (int64_t o = 0; o < s.oc; ++o) {
            const int64_t g = o / ocg;
            float* yp = y + (nb * s.oc + o) * osp;
            for (int64_t i = 0; i < osp; ++i) yp[i] = 0.f;
            for (int64_t c = 0; c < cg; ++c) {
                const float* xp = x + (nb * s.c + g * cg + c) * isp;
                const float* wp = wt + (o * cg + c) * ksp;
                for (int64_t kz = 0; kz < s.kd; ++kz)
                    for (int64_t ky = 0; ky < s.kh; ++ky)
                        for (int64_t kx = 0; kx < s.kw; ++kx) {
                            const float wv = wp[(kz * s.kh + ky) * s.kw + kx];
                            for (int64_t oz = 0; oz < s.od; ++oz) {
                                const int64_t iz = oz * s.sd - s.pd + kz * s.dd;
                                if (iz < 0 || iz >= s.d) continue;
                                for (int64_t oy = 0; oy < s.oh; ++oy) {
                                    const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
                                    if (iy < 0 || iy >= s.h) continue;
                                    float* row = yp + (oz * s.oh + oy) * s.ow;
                                    const float* xr = xp + (iz * s.h + iy) * s.w;
                                    // valid ox: 0 <= ox*sw - pw + kx*dw < w
                                    const int64_t base = kx * s.dw - s.pw;
                                    int64_t lo = base >= 0 ? 0 : (-base + s.sw - 1) / s.sw;
                                    int64_t hi = (s.w - 1 - base) < 0 ? -1 : (s.w - 1 - base) / s.sw;
                                    if (hi > s.ow - 1) hi = s.ow - 1;
                                    #pragma omp simd
                                    for (int64_t ox = lo; ox <= hi; ++ox) row[ox] += wv * xr[ox * s.sw + base];
                                }
                            }
                        }
            }
            for (int64_t i = 0; i < osp; ++i) yp[i] = e(yp[i], (nb * s.oc + o) * osp + i);
        }
    return 0;
}

template <class E>
int cg_conv_transpose(const float* x, const float* wt, float* y, const CgConvShape& s, const E& e) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups;
    const int64_t osp = s.od * s.oh * s.ow, isp = s.d * s.h * s.w, ksp = s.kd * s.kh * s.kw;
    const int64_t total = s.n * s.oc * osp;
    #pragma omp parallel for schedule(static)
    for (int64_t index = 0; index < total; ++index) {
        const int64_t sp = index % osp, o = (index / osp) % s.oc, nb = index / (osp * s.oc);
        const int64_t oz = sp / (s.oh * s.ow), oy = (sp / s.ow) % s.oh, ox = sp % s.ow;
        const int64_t g = o / ocg, og = o - g * ocg;
        float acc = 0.f;
        for (int64_t kz = 0; kz < s.kd; ++kz) {
            const int64_t tz = oz + s.pd - kz * s.dd;
            if (tz < 0 || tz % s.sd || tz / s.sd >= s.d) continue;
            for (int64_t ky = 0; ky < s.kh; ++ky) {
                const int64_t ty = oy + s.ph - ky * s.dh;
                if (ty < 0 || ty % s.sh || ty / s.sh >= s.h) continue;
                for (int64_t kx = 0; kx < s.kw; ++kx) {
                    const int64_t tx = ox + s.pw - kx * s.dw;
                    if (tx < 0 || tx % s.sw || tx / s.sw >= s.w) continue;
                    const float* xp = x + (nb * s.c + g * cg) * isp + ((tz / s.sd) * s.h + ty / s.sh) * s.w + tx / s.sw;
                    const float* wp = wt + (g * cg * ocg + og) * ksp + (kz * s.kh + ky) * s.kw + kx;
                    for (int64_t c = 0; c < cg; ++c) acc += xp[c * isp] * wp[c * ocg * ksp];
                }
            }
        }
        y[index] = e(acc, index);
    }
    return 0;
}

template <bool IS_MAX, class E>
int cg_pool(const float* x, float* y, const CgConvShape& s, bool count_include_pad, const E& e) {
    const int64_t osp = s.od * s.oh * s.ow, isp = s.d * s.h * s.w;
    const int64_t total = s.n * s.c * osp;
    #pragma omp parallel for schedule(static)
    for (int64_t index = 0; index < total; ++index) {
        const int64_t sp = index % osp, nc = index / osp;
        const int64_t oz = sp / (s.oh * s.ow), oy = (sp / s.ow) % s.oh, ox = sp % s.ow;
        const float* xp = x + nc * isp;
        float acc = IS_MAX ? -INFINITY : 0.f;
        int64_t counted = 0;
        for (int64_t kz = 0; kz < s.kd; ++kz) {
            const int64_t iz = oz * s.sd - s.pd + kz * s.dd;
            for (int64_t ky = 0; ky < s.kh; ++ky) {
                const int64_t iy = oy * s.sh - s.ph + ky * s.dh;
                for (int64_t kx = 0; kx < s.kw; ++kx) {
                    const int64_t ix = ox * s.sw - s.pw + kx * s.dw;
                    if (iz >= 0 && iz < s.d && iy >= 0 && iy < s.h && ix >= 0 && ix < s.w) {
                        const float v = xp[(iz * s.h + iy) * s.w + ix];
                        if (IS_MAX) acc = cg_max(acc, v);
                        else { acc += v; ++counted; }
                    }
                }
            }
        }
        if (!IS_MAX) {
            int64_t div = counted;
            if (count_include_pad) {
                const int64_t z0 = oz * s.sd - s.pd, y0 = oy * s.sh - s.ph, x0 = ox * s.sw - s.pw;
                const int64_t z1 = z0 + s.kd < s.d + s.pd ? z0 + s.kd : s.d + s.pd;
                const int64_t y1 = y0 + s.kh < s.h + s.ph ? y0 + s.kh : s.h + s.ph;
                const int64_t x1 = x0 + s.kw < s.w + s.pw ? x0 + s.kw : s.w + s.pw;
                div = (z1 - z0) * (y1 - y0) * (x1 - x0);
            }
            acc = div > 0 ? acc / (float)div : 0.f;
        }
        y[index] = e(acc, index);
    }
    return 0;
}
