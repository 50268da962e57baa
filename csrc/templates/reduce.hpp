// Templates: reductions and normalisations over one axis (C++ twin for the CPU backend).
//
// Same contracts as reduce.cuh: x viewed as [outer, R, inner]; cg_reduce<KIND> (with its prologue), cg_argreduce<IS_MAX>,
// cg_normalize<KIND> with the epilogue `float operator()(float v, int64_t index) const` and CgAffine.
// OpenMP threads over the (outer, inner) positions in chunks of ROWS; a row (inner == 1) is walked with
// `#pragma omp simd` reductions.
//
// Knobs (template parameters): ROWS (positions per OpenMP chunk) in {1, 4, 16, 64}.
#pragma once
#include "common.h"
#include <omp.h>

enum { CG_SUM = 0, CG_MAX = 1, CG_MIN = 2, CG_PROD = 3, CG_LOGSUMEXP = 4 };
enum { CG_SOFTMAX = 0, CG_LOG_SOFTMAX = 1, CG_LAYER_NORM = 2, CG_RMS_NORM = 3 };

struct CgIdentity {
    float operator()(float v, int64_t) const { return v; }
};

struct CgAffine {
    const float* g;
    const float* b;
    int64_t groups, group_size, div;
    float apply(float v, int64_t row, int64_t r) const {
        if (g == nullptr && b == nullptr) return v;
        const int64_t k = (row % groups) * group_size + r / div;
        return (g ? v * g[k] : v) + (b ? b[k] : 0.f);
    }
};

// KIND over the R values P(p[r * stride], base + r * stride) (P: the prologue, see cg_reduce).
template <int KIND, class P>
static inline float cg_reduce_line(const float* p, int64_t R, int64_t stride, int64_t base, const P& pro) {
    if (KIND == CG_SUM) {
        float s = 0.f;
        if (stride == 1) {
            #pragma omp simd reduction(+ : s)
            for (int64_t r = 0; r < R; ++r) s += pro(p[r], base + r);
        } else {
            for (int64_t r = 0; r < R; ++r) s += pro(p[r * stride], base + r * stride);
        }
        return s;
    }
    if (KIND == CG_MAX || KIND == CG_MIN || KIND == CG_LOGSUMEXP) {
        float m = (KIND == CG_MIN) ? INFINITY : -INFINITY;
        for (int64_t r = 0; r < R; ++r) {
            const float v = pro(p[r * stride], base + r * stride);
            m = KIND == CG_MIN ? cg_min(m, v) : cg_max(m, v);
        }
        if (KIND != CG_LOGSUMEXP) return m;
        const float shift = std::isinf(m) ? 0.f : m;
        float s = 0.f;
        for (int64_t r = 0; r < R; ++r) s += expf(pro(p[r * stride], base + r * stride) - shift);
        return logf(s) + shift;
    }
    float q = 1.f;
    for (int64_t r = 0; r < R; ++r) q *= pro(p[r * stride], base + r * stride);
    return q;
}

// P, the prologue: the value reduced at x's linear index i is P(x[i], i) (CgIdentity for none).
template <int ROWS, int KIND, class P, class E>
int cg_reduce(const float* x, float* y, int64_t outer, int64_t R, int64_t inner, const P& p, const E& e) {
    const int64_t total = outer * inner;
    #pragma omp parallel for schedule(static, ROWS)
    for (int64_t t = 0; t < total; ++t) {
        const int64_t o = t / inner, j = t - o * inner;
        y[t] = e(cg_reduce_line<KIND>(x + o * R * inner + j, R, inner, o * R * inner + j, p), t);
    }
    return 0;
}

template <int ROWS, bool IS_MAX>
int cg_argreduce(const float* x, int64_t* y, int64_t outer, int64_t R, int64_t inner) {
    const int64_t total = outer * inner;
    #pragma omp parallel for schedule(static, ROWS)
    for (int64_t t = 0; t < total; ++t) {
        const int64_t o = t / inner, j = t - o * inner;
        const float* p = x + o * R * inner + j;
        int64_t best = 0;
        float bv = p[0];
        for (int64_t r = 1; r < R; ++r) {
            const float v = p[r * inner];
            if (bv != bv) break;                        // NaN is the extreme, first one wins (torch)
            if (v != v || (IS_MAX ? v > bv : v < bv)) { bv = v; best = r; }
        }
        y[t] = R > 0 ? best : 0;
    }
    return 0;
}

// P, the prologue: the tensor normalised is P(x[i], i) (CgIdentity for none), as in reduce.cuh.
template <int ROWS, int KIND, class P, class E>
int cg_normalize(const float* x, float* y, int64_t outer, int64_t R, int64_t inner, float eps, CgAffine aff,
                 const P& pro, const E& e) {
    const int64_t total = outer * inner;
    #pragma omp parallel for schedule(static, ROWS)
    for (int64_t t = 0; t < total; ++t) {
        const int64_t o = t / inner, j = t - o * inner, base = o * R * inner + j;
        const float* p = x + base;
        float* q = y + base;
        auto at = [&](int64_t r) { return pro(p[r * inner], base + r * inner); };
        float a = 0.f, b = 1.f;
        if (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) {
            const float m = cg_reduce_line<CG_MAX>(p, R, inner, base, pro);
            a = std::isinf(m) ? 0.f : m;
            float s = 0.f;
            for (int64_t r = 0; r < R; ++r) s += expf(at(r) - a);
            b = KIND == CG_SOFTMAX ? 1.f / s : logf(s);
        } else if (KIND == CG_LAYER_NORM) {
            a = cg_reduce_line<CG_SUM>(p, R, inner, base, pro) / (float)R;
            float v = 0.f;
            for (int64_t r = 0; r < R; ++r) { const float d = at(r) - a; v += d * d; }
            b = 1.f / sqrtf(v / (float)R + eps);
        } else {
            float v = 0.f;
            for (int64_t r = 0; r < R; ++r) v += at(r) * at(r);
            b = 1.f / sqrtf(v / (float)R + eps);
        }
        for (int64_t r = 0; r < R; ++r) {
            const float v = at(r);
            float u;
            if (KIND == CG_SOFTMAX) u = expf(v - a) * b;
            else if (KIND == CG_LOG_SOFTMAX) u = v - a - b;
            else u = aff.apply((v - a) * b, o, r);
            q[r * inner] = e(u, (o * R + r) * inner + j);
        }
    }
    return 0;
}
