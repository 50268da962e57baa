// Templates: reductions and normalisations over one axis (CUDA).
//
// The input x is viewed as [outer, R, inner] (contiguous): the reduced axis has length R and stride
// `inner`. Two layouts, picked by the launcher:
//   inner == 1  one block per row: BLOCK threads stride over the row with V-wide loads, warp-shuffle
//               + shared-memory tree for the block result (a few long rows are split over many
//               blocks and reduced in two passes, see cg_reduce);
//   inner  > 1  one thread per (outer, inner) column walking R, so a warp reads consecutive addresses.
//
// cg_reduce<KIND>: y[o, j] = E(reduce_r P(x[o, r, j], i), o * inner + j), i the linear index of x's
//   element and P a pointwise prologue (CgIdentity for none), KIND one of
//   CG_SUM, CG_MAX, CG_MIN, CG_PROD, CG_LOGSUMEXP (log sum exp(x - max) + max; rows in one pass with a
//   running max).
//   Mean is CG_SUM with E multiplying by 1/R.
// cg_argreduce<IS_MAX>: int64 y[o, j] = first index r of the max (min) of x[o, :, j], as torch.argmax.
// cg_normalize<KIND>: y has x's shape, y[o, r, j] = E(norm(P(x))[o, r, j], linear index), P the prologue
//   as cg_reduce's, KIND one of
//   CG_SOFTMAX, CG_LOG_SOFTMAX (max-shifted),
//   CG_LAYER_NORM (mean and biased variance, then (x - mean) * rsqrt(var + eps) * g + b),
//   CG_RMS_NORM (x * rsqrt(mean(x^2) + eps) * g + b).
//   Rows (inner == 1) take their statistics in one pass (see CgPair) and keep a row of at most
//   CG_ROW_CACHE floats in shared memory for the output pass; fewer than CG_SPLIT_ROWS rows of at least
//   CG_SPLIT_LEN are cut into chunks over many blocks (chunk statistics, row coefficients, then the
//   output, three launches); columns walk R three times per thread.
//   g and b may be null; their index for element (row, r) is (row % aff_groups) * aff_group_size
//   + r / aff_div (layer norm: 1, 0, 1; group norm over rows (n, group): G, C/G, spatial size).
//
// Knobs (template parameters):
//   BLOCK  threads per block   32, 64, 128, 256, 512, 1024
//   V      vector width        1, 2, 4 (rows only; falls back to 1 when R % V or the alignment forbids)
// Epilogue functor contract: `CG_FN float operator()(float v, int64_t index) const`.
#pragma once
#include "common.h"

enum { CG_SUM = 0, CG_MAX = 1, CG_MIN = 2, CG_PROD = 3, CG_LOGSUMEXP = 4 };
enum { CG_SOFTMAX = 0, CG_LOG_SOFTMAX = 1, CG_LAYER_NORM = 2, CG_RMS_NORM = 3 };

struct CgIdentity {
    CG_FN float operator()(float v, int64_t) const { return v; }
};

template <int OP> CG_FN float cg_combine(float a, float b) {
    if constexpr (OP == CG_SUM) return a + b;
    else if constexpr (OP == CG_MAX) return cg_max(a, b);
    else if constexpr (OP == CG_MIN) return cg_min(a, b);
    else return a * b;
}
template <int OP> CG_FN float cg_identity() {
    if constexpr (OP == CG_SUM) return 0.f;
    else if constexpr (OP == CG_MAX) return -INFINITY;
    else if constexpr (OP == CG_MIN) return INFINITY;
    else return 1.f;
}

CG_FN float cg_shfl_xor(float v, int o) { return __shfl_xor_sync(0xffffffffu, v, o); }

// Every thread's v combined by f (identity: what a thread without a value contributes); every thread
// gets the result: warp shuffles, then the warps' results through shared memory. T needs a
// cg_shfl_xor overload. Safe to call repeatedly (syncs before reusing the scratch).
template <int BLOCK, class T, class F> __device__ T cg_block_combine(T v, T identity, F f) {
    __shared__ T scratch[32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = f(v, cg_shfl_xor(v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (int)threadIdx.x < BLOCK / 32 ? scratch[threadIdx.x] : identity;
    if (threadIdx.x < 32) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = f(v, cg_shfl_xor(v, o));
        if (threadIdx.x == 0) scratch[0] = v;
    }
    __syncthreads();
    return scratch[0];
}

template <int BLOCK, int OP> __device__ float cg_block_reduce(float v) {
    return cg_block_combine<BLOCK>(v, cg_identity<OP>(), [](float a, float b) { return cg_combine<OP>(a, b); });
}

// A thread's share of row[begin, end): f(r, v) for its V-wide vectors at r = begin + (threadIdx.x + k *
// BLOCK) * V in increasing order, CG_ROW_LOADS of them loaded before any is used, so a thread keeps
// CG_ROW_LOADS vectors in flight (one load per loop iteration, as before, left the H200's memory at about
// half its bandwidth with 768 threads per SM, session 11).
#define CG_ROW_LOADS 4
template <int BLOCK, int V, class F>
CG_FN void cg_row_walk(const float* __restrict__ row, int64_t begin, int64_t end, F&& f) {
    constexpr int64_t step = (int64_t)BLOCK * V;
    int64_t r = begin + (int64_t)threadIdx.x * V;
    for (; r + (CG_ROW_LOADS - 1) * step < end; r += CG_ROW_LOADS * step) {
        float v[CG_ROW_LOADS][V];
#pragma unroll
        for (int u = 0; u < CG_ROW_LOADS; ++u) cg_load<V>(row + r + u * step, v[u]);
#pragma unroll
        for (int u = 0; u < CG_ROW_LOADS; ++u) f(r + u * step, v[u]);
    }
    for (; r < end; r += step) {
        float v[V];
        cg_load<V>(row + r, v);
        f(r, v);
    }
}

// OP over row[0..R) of the values P(x, base + r) (P: the prologue); every thread gets it.
template <int BLOCK, int V, int OP, class P>
__device__ float cg_row_pass(const float* __restrict__ row, int64_t R, int64_t base, const P& p) {
    float acc = cg_identity<OP>();
    cg_row_walk<BLOCK, V>(row, 0, R, [&](int64_t r, const float (&v)[V]) {
#pragma unroll
        for (int j = 0; j < V; ++j) acc = cg_combine<OP>(acc, p(v[j], base + r + j));
    });
    return cg_block_reduce<BLOCK, OP>(acc);
}

// One pass over a row gives what the normalisation needs, as a pair combined across threads:
//   softmax, log-softmax  (m, s): the running max and the sum of exp(x - m), rescaled when m grows;
//   layer norm            (S1, S2): the sums of x - K and (x - K)^2, K = the row's first element (a
//                          value of the row, so the shifted sums do not cancel the way raw ones do);
//   RMS norm              (0, S2): the sum of x^2.
// A row then costs one read for the statistics and one read and one write for the output (three
// passes over the row before: max, sum, output). A row of at most CG_ROW_CACHE floats is also kept
// in shared memory by the statistics pass, so the output pass reads no global memory.
#define CG_ROW_CACHE 24576  // floats: 96 KiB of dynamic shared memory, two blocks per H100/H200 SM

struct CgPair { float a, b; };

template <int KIND> CG_FN CgPair cg_pair_identity() {
    if constexpr (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) return {-INFINITY, 0.f};
    else return {0.f, 0.f};
}

template <int KIND> CG_FN CgPair cg_pair_combine(CgPair p, CgPair q) {
    if constexpr (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) {
        const float m = cg_max(p.a, q.a);
        if (m == -INFINITY) return {m, 0.f};  // both empty (or all -inf): nothing to rescale
        return {m, p.b * expf(p.a - m) + q.b * expf(q.a - m)};
    } else {
        return {p.a + q.a, p.b + q.b};
    }
}

// Adds x (shift: the layer norm's K) to a thread's pair.
template <int KIND> CG_FN void cg_pair_add(CgPair& acc, float x, float shift) {
    if constexpr (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) {
        if (x > acc.a) { acc.b = acc.b * expf(acc.a - x) + 1.f; acc.a = x; }
        else if (x != -INFINITY) acc.b += expf(x - acc.a);  // adds 0 (or NaN for a NaN x, as torch's row gets)
    } else if constexpr (KIND == CG_LAYER_NORM) {
        const float d = x - shift;
        acc.a += d;
        acc.b += d * d;
    } else {
        acc.b += x * x;
    }
}

CG_FN CgPair cg_shfl_xor(CgPair v, int o) { return {cg_shfl_xor(v.a, o), cg_shfl_xor(v.b, o)}; }

// Every thread gets the block's combined pair.
template <int BLOCK, int KIND> __device__ CgPair cg_block_pair(CgPair v) {
    return cg_block_combine<BLOCK>(v, cg_pair_identity<KIND>(),
                                   [](CgPair p, CgPair q) { return cg_pair_combine<KIND>(p, q); });
}

template <int BLOCK, int V, int KIND, class P, class E>
__global__ void __launch_bounds__(BLOCK) cg_reduce_rows(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t outer, int64_t R, P p, E e) {
    for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
        const float* row = x + o * R;
        float v;
        if constexpr (KIND == CG_LOGSUMEXP) {  // one pass: the softmax statistics (max, sum of exp(x - max))
            CgPair acc = cg_pair_identity<CG_SOFTMAX>();
            cg_row_walk<BLOCK, V>(row, 0, R, [&](int64_t r, const float (&x4)[V]) {
#pragma unroll
                for (int j = 0; j < V; ++j) cg_pair_add<CG_SOFTMAX>(acc, p(x4[j], o * R + r + j), 0.f);
            });
            const CgPair t = cg_block_pair<BLOCK, CG_SOFTMAX>(acc);
            v = isinf(t.a) ? logf(t.b * expf(t.a)) : logf(t.b) + t.a;  // as log(sum exp(x)) when the max is infinite
        } else {
            v = cg_row_pass<BLOCK, V, KIND>(row, R, o * R, p);
        }
        if (threadIdx.x == 0) y[o] = e(v, o);
    }
}

// Column walks (here, in cg_argreduce and cg_normalize_cols) are unrolled by 4 so that a thread has
// several loads in flight, as cg_row_walk does for rows.
template <int BLOCK, int KIND, class P, class E>
__global__ void __launch_bounds__(BLOCK) cg_reduce_cols(const float* __restrict__ x, float* __restrict__ y,
                                                        int64_t outer, int64_t R, int64_t inner, P p, E e) {
    const int64_t total = outer * inner;
    for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < total; t += (int64_t)gridDim.x * BLOCK) {
        const int64_t o = t / inner, j = t - o * inner;
        const float* col = x + o * R * inner + j;
        const int64_t base = o * R * inner + j;  // x's index of (o, 0, j)
        float v;
        if constexpr (KIND == CG_LOGSUMEXP) {
            float m = -INFINITY;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) m = cg_max(m, p(col[r * inner], base + r * inner));
            const float shift = isinf(m) ? 0.f : m;
            float s = 0.f;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) s += expf(p(col[r * inner], base + r * inner) - shift);
            v = logf(s) + shift;
        } else {
            v = cg_identity<KIND>();
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) v = cg_combine<KIND>(v, p(col[r * inner], base + r * inner));
        }
        y[t] = e(v, t);
    }
}

static inline unsigned cg_grid(int64_t work, int64_t per_block) {
    int64_t blocks = (work + per_block - 1) / per_block;
    if (blocks > (1LL << 30)) blocks = 1LL << 30;
    return (unsigned)(blocks < 1 ? 1 : blocks);
}

// Split rows: block (c, o) reduces x[o, c*chunk : (c+1)*chunk) into partial[o * chunks + c].
template <int BLOCK, int V, int KIND, class P>
__global__ void __launch_bounds__(BLOCK) cg_reduce_chunks(const float* __restrict__ x, float* __restrict__ partial,
                                                          int64_t R, int64_t chunk, P p) {
    const int64_t o = blockIdx.y, c = blockIdx.x, start = c * chunk;
    const int64_t len = R - start < chunk ? R - start : chunk;
    const float v = cg_row_pass<BLOCK, V, KIND>(x + o * R + start, len, o * R + start, p);
    if (threadIdx.x == 0) partial[o * gridDim.x + c] = v;
}

// Few long rows (fewer than CG_SPLIT_ROWS rows of at least CG_SPLIT_LEN): each row is cut into chunks
// reduced by separate blocks into a stream-ordered scratch buffer, then a second pass reduces the
// partials and applies the epilogue (not for logsumexp, whose partials would need a shared shift).
#define CG_SPLIT_ROWS 256
#define CG_SPLIT_LEN 65536

// P, the prologue: the value reduced at x's linear index i is P(x[i], i) (a pointwise map fused into
// the load, with the epilogue's functor contract; CgIdentity for none).
template <int BLOCK, int V, int KIND, class P, class E>
int cg_reduce(const float* x, float* y, int64_t outer, int64_t R, int64_t inner, const P& p, const E& e,
              cudaStream_t stream) {
    if (outer * inner <= 0) return 0;
    if (inner == 1) {
        if (V > 1 && (R % V != 0 || !cg_aligned({x}, 4 * V)))
            return cg_reduce<BLOCK, 1, KIND, P, E>(x, y, outer, R, inner, p, e, stream);
        if (KIND != CG_LOGSUMEXP && outer < CG_SPLIT_ROWS && R >= CG_SPLIT_LEN) {
            int64_t chunks = 1024 / outer;
            const int64_t unit = (int64_t)BLOCK * V * 4;
            if (chunks > R / unit) chunks = R / unit;
            if (chunks > 1) {
                const int64_t chunk = ((R + chunks - 1) / chunks + unit - 1) / unit * unit;  // a multiple of V
                chunks = (R + chunk - 1) / chunk;
                float* partial = nullptr;
                cudaError_t status = cudaMallocAsync(reinterpret_cast<void**>(&partial), sizeof(float) * outer * chunks, stream);
                if (status != cudaSuccess) return (int)status;
                cg_reduce_chunks<BLOCK, V, KIND, P><<<dim3((unsigned)chunks, (unsigned)outer), BLOCK, 0, stream>>>(
                    x, partial, R, chunk, p);
                cg_reduce_rows<BLOCK, 1, KIND, CgIdentity, E><<<cg_grid(outer, 1), BLOCK, 0, stream>>>(
                    partial, y, outer, chunks, CgIdentity{}, e);
                status = cudaGetLastError();
                const cudaError_t freed = cudaFreeAsync(partial, stream);
                return (int)(status != cudaSuccess ? status : freed);
            }
        }
        cg_reduce_rows<BLOCK, V, KIND, P, E><<<cg_grid(outer, 1), BLOCK, 0, stream>>>(x, y, outer, R, p, e);
    } else {
        cg_reduce_cols<BLOCK, KIND, P, E><<<cg_grid(outer * inner, BLOCK), BLOCK, 0, stream>>>(x, y, outer, R, inner, p, e);
    }
    return (int)cudaGetLastError();
}

// ------------------------------------------------------------------------------------- argmax / argmin
template <bool IS_MAX> CG_FN bool cg_better(float v, int64_t i, float best, int64_t best_i) {
    if (v != v) return !(best != best) || i < best_i;       // NaN counts as the extreme, as in torch
    if (best != best) return false;
    return (IS_MAX ? v > best : v < best) || (v == best && i < best_i);
}

template <int BLOCK, bool IS_MAX>
__global__ void __launch_bounds__(BLOCK) cg_argreduce_kernel(const float* __restrict__ x, int64_t* __restrict__ y,
                                                             int64_t outer, int64_t R, int64_t inner) {
    __shared__ float best_v[BLOCK];
    __shared__ int64_t best_i[BLOCK];
    if (inner == 1) {
        for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
            float bv = IS_MAX ? -INFINITY : INFINITY;
            int64_t bi = R;
#pragma unroll 4
            for (int64_t r = threadIdx.x; r < R; r += BLOCK) {
                const float v = x[o * R + r];
                if (cg_better<IS_MAX>(v, r, bv, bi)) { bv = v; bi = r; }
            }
            __syncthreads();
            best_v[threadIdx.x] = bv; best_i[threadIdx.x] = bi;
            __syncthreads();
            for (int s = BLOCK / 2; s > 0; s >>= 1) {
                if ((int)threadIdx.x < s && cg_better<IS_MAX>(best_v[threadIdx.x + s], best_i[threadIdx.x + s],
                                                               best_v[threadIdx.x], best_i[threadIdx.x])) {
                    best_v[threadIdx.x] = best_v[threadIdx.x + s]; best_i[threadIdx.x] = best_i[threadIdx.x + s];
                }
                __syncthreads();
            }
            if (threadIdx.x == 0) y[o] = best_i[0] >= R ? 0 : best_i[0];
        }
    } else {
        const int64_t total = outer * inner;
        for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < total; t += (int64_t)gridDim.x * BLOCK) {
            const int64_t o = t / inner, j = t - o * inner;
            float bv = IS_MAX ? -INFINITY : INFINITY;
            int64_t bi = R;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) {
                const float v = x[(o * R + r) * inner + j];
                if (cg_better<IS_MAX>(v, r, bv, bi)) { bv = v; bi = r; }
            }
            y[t] = bi >= R ? 0 : bi;
        }
    }
}

template <int BLOCK, bool IS_MAX>
int cg_argreduce(const float* x, int64_t* y, int64_t outer, int64_t R, int64_t inner, cudaStream_t stream) {
    if (outer * inner <= 0) return 0;
    const unsigned grid = inner == 1 ? cg_grid(outer, 1) : cg_grid(outer * inner, BLOCK);
    cg_argreduce_kernel<BLOCK, IS_MAX><<<grid, BLOCK, 0, stream>>>(x, y, outer, R, inner);
    return (int)cudaGetLastError();
}

// ------------------------------------------------------------------------------------- normalisations
struct CgAffine {
    const float* g;
    const float* b;
    int64_t groups, group_size, div;
    CG_FN float apply(float v, int64_t row, int64_t r) const {
        if (g == nullptr && b == nullptr) return v;
        const int64_t k = (row % groups) * group_size + r / div;
        return (g ? v * g[k] : v) + (b ? b[k] : 0.f);
    }
};

// The row's coefficients from its pair: y = (x - a) * b, or for softmax exp(x - a) * b, log-softmax x - a - b.
template <int KIND> CG_FN float2 cg_norm_coefficients(CgPair t, float shift, int64_t R, float eps) {
    if constexpr (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) {
        const float s = isinf(t.a) ? t.b * expf(t.a) : t.b;  // the sum with shift 0 when the max is infinite
        return make_float2(isinf(t.a) ? 0.f : t.a, KIND == CG_SOFTMAX ? 1.f / s : logf(s));
    } else if constexpr (KIND == CG_LAYER_NORM) {
        const float mean_shifted = t.a / (float)R;
        return make_float2(shift + mean_shifted, rsqrtf(fmaxf(t.b / (float)R - mean_shifted * mean_shifted, 0.f) + eps));
    } else {
        return make_float2(0.f, rsqrtf(t.b / (float)R + eps));
    }
}

template <int KIND> CG_FN float cg_norm_output(float v, float2 c, const CgAffine& aff, int64_t row, int64_t r) {
    if constexpr (KIND == CG_SOFTMAX) return expf(v - c.x) * c.y;
    else if constexpr (KIND == CG_LOG_SOFTMAX) return v - c.x - c.y;
    else return aff.apply((v - c.x) * c.y, row, r);
}

// P, the prologue: the row normalised is P(x[i], i) at x's linear index i (CgIdentity for none); rows
// kept in shared memory hold P's values.
template <int BLOCK, int V, int KIND, bool CACHED, class P, class E>
__global__ void __launch_bounds__(BLOCK) cg_normalize_rows(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t outer, int64_t R, float eps, CgAffine aff, P p, E e) {
    extern __shared__ float4 cg_row_smem[];  // float4: the V-wide accesses stay aligned
    float* cache = reinterpret_cast<float*>(cg_row_smem);
    for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
        const float* row = x + o * R;
        const float shift = KIND == CG_LAYER_NORM ? p(row[0], o * R) : 0.f;
        CgPair acc = cg_pair_identity<KIND>();
        cg_row_walk<BLOCK, V>(row, 0, R, [&](int64_t r, const float (&x4)[V]) {
            float v[V];
#pragma unroll
            for (int j = 0; j < V; ++j) v[j] = p(x4[j], o * R + r + j);
            if constexpr (CACHED) cg_store<V>(cache + r, v);  // read back and refilled by this thread only: no barrier
#pragma unroll
            for (int j = 0; j < V; ++j) cg_pair_add<KIND>(acc, v[j], shift);
        });
        const float2 c = cg_norm_coefficients<KIND>(cg_block_pair<BLOCK, KIND>(acc), shift, R, eps);
        cg_row_walk<BLOCK, V>(CACHED ? cache : row, 0, R, [&](int64_t r, const float (&x4)[V]) {
            float v[V];
#pragma unroll
            for (int j = 0; j < V; ++j) {
                const float u = CACHED ? x4[j] : p(x4[j], o * R + r + j);
                v[j] = e(cg_norm_output<KIND>(u, c, aff, o, r + j), o * R + r + j);
            }
            cg_store<V>(y + o * R + r, v);
        });
    }
}

// Few long rows (as cg_reduce's split): block (c, o) takes the pair of x[o, c*chunk : (c+1)*chunk)
// (the layer norm's shift is the row's first element in every chunk, so the pairs add up) ...
template <int BLOCK, int V, int KIND, class P>
__global__ void __launch_bounds__(BLOCK) cg_normalize_chunks(const float* __restrict__ x, CgPair* __restrict__ partial,
                                                             int64_t R, int64_t chunk, P p) {
    const int64_t o = blockIdx.y, start = (int64_t)blockIdx.x * chunk;
    const int64_t end = R - start < chunk ? R : start + chunk;
    const float* row = x + o * R;
    const float shift = KIND == CG_LAYER_NORM ? p(row[0], o * R) : 0.f;
    CgPair acc = cg_pair_identity<KIND>();
    cg_row_walk<BLOCK, V>(row, start, end, [&](int64_t r, const float (&v)[V]) {
#pragma unroll
        for (int j = 0; j < V; ++j) cg_pair_add<KIND>(acc, p(v[j], o * R + r + j), shift);
    });
    const CgPair t = cg_block_pair<BLOCK, KIND>(acc);
    if (threadIdx.x == 0) partial[o * gridDim.x + blockIdx.x] = t;
}

// ... one block per row combines its chunks' pairs into the row's coefficients ...
template <int BLOCK, int KIND, class P>
__global__ void __launch_bounds__(BLOCK) cg_normalize_coefficients(const float* __restrict__ x,
                                                                   const CgPair* __restrict__ partial,
                                                                   float2* __restrict__ coef, int64_t chunks,
                                                                   int64_t R, float eps, P p) {
    const int64_t o = blockIdx.x;
    CgPair acc = cg_pair_identity<KIND>();
    for (int64_t c = threadIdx.x; c < chunks; c += BLOCK) acc = cg_pair_combine<KIND>(acc, partial[o * chunks + c]);
    const CgPair t = cg_block_pair<BLOCK, KIND>(acc);
    if (threadIdx.x == 0)
        coef[o] = cg_norm_coefficients<KIND>(t, KIND == CG_LAYER_NORM ? p(x[o * R], o * R) : 0.f, R, eps);
}

// ... and every element is written from its row's coefficients (R % V == 0: a vector stays in its row).
template <int BLOCK, int V, int KIND, class P, class E>
__global__ void __launch_bounds__(BLOCK) cg_normalize_apply(const float* __restrict__ x, float* __restrict__ y,
                                                            const float2* __restrict__ coef, int64_t outer, int64_t R,
                                                            CgAffine aff, P p, E e) {
    const int64_t n = outer * R;
    for (int64_t i = ((int64_t)blockIdx.x * BLOCK + threadIdx.x) * V; i < n; i += (int64_t)gridDim.x * BLOCK * V) {
        const int64_t o = i / R, r = i - o * R;
        const float2 c = coef[o];
        float v[V];
        cg_load<V>(x + i, v);
#pragma unroll
        for (int j = 0; j < V; ++j) v[j] = e(cg_norm_output<KIND>(p(v[j], i + j), c, aff, o, r + j), i + j);
        cg_store<V>(y + i, v);
    }
}

template <int BLOCK, int KIND, class P, class E>
__global__ void __launch_bounds__(BLOCK) cg_normalize_cols(const float* __restrict__ x, float* __restrict__ y,
                                                           int64_t outer, int64_t R, int64_t inner, float eps,
                                                           CgAffine aff, P p, E e) {
    const int64_t total = outer * inner;
    for (int64_t t = (int64_t)blockIdx.x * BLOCK + threadIdx.x; t < total; t += (int64_t)gridDim.x * BLOCK) {
        const int64_t o = t / inner, j = t - o * inner;
        const float* col = x + o * R * inner + j;
        const int64_t base = o * R * inner + j;  // x's index of (o, 0, j)
        auto at = [&](int64_t r) { return p(col[r * inner], base + r * inner); };
        float a = 0.f, b = 1.f;
        if constexpr (KIND == CG_SOFTMAX || KIND == CG_LOG_SOFTMAX) {
            float m = -INFINITY;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) m = cg_max(m, at(r));
            a = isinf(m) ? 0.f : m;
            float s = 0.f;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) s += expf(at(r) - a);
            b = KIND == CG_SOFTMAX ? 1.f / s : logf(s);
        } else if constexpr (KIND == CG_LAYER_NORM) {
            float s = 0.f;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) s += at(r);
            a = s / (float)R;
            float q = 0.f;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) { const float d = at(r) - a; q += d * d; }
            b = rsqrtf(q / (float)R + eps);
        } else {
            float q = 0.f;
#pragma unroll 4
            for (int64_t r = 0; r < R; ++r) { const float v = at(r); q += v * v; }
            b = rsqrtf(q / (float)R + eps);
        }
#pragma unroll 4
        for (int64_t r = 0; r < R; ++r) {
            const float v = at(r);
            float u;
            if constexpr (KIND == CG_SOFTMAX) u = expf(v - a) * b;
            else if constexpr (KIND == CG_LOG_SOFTMAX) u = v - a - b;
            else u = aff.apply((v - a) * b, o, r);
            const int64_t index = base + r * inner;
            y[index] = e(u, index);
        }
    }
}

template <int BLOCK, int V, int KIND, class P, class E>
int cg_normalize(const float* x, float* y, int64_t outer, int64_t R, int64_t inner, float eps, CgAffine aff,
                 const P& p, const E& e, cudaStream_t stream) {
    if (outer * inner * R <= 0) return 0;
    if (inner == 1) {
        if (V > 1 && (R % V != 0 || !cg_aligned({x, y}, 4 * V)))
            return cg_normalize<BLOCK, 1, KIND, P, E>(x, y, outer, R, inner, eps, aff, p, e, stream);
        if (outer < CG_SPLIT_ROWS && R >= CG_SPLIT_LEN) {  // too few rows to fill the device
            const int64_t unit = (int64_t)BLOCK * V * 4;
            int64_t chunks = 1024 / outer;
            if (chunks > R / unit) chunks = R / unit;
            const int64_t chunk = ((R + chunks - 1) / chunks + unit - 1) / unit * unit;  // a multiple of V
            chunks = (R + chunk - 1) / chunk;
            void* scratch = nullptr;
            const size_t pairs = sizeof(CgPair) * (size_t)(outer * chunks);
            cudaError_t status = cudaMallocAsync(&scratch, pairs + sizeof(float2) * (size_t)outer, stream);
            if (status != cudaSuccess) return (int)status;
            CgPair* partial = static_cast<CgPair*>(scratch);
            float2* coef = reinterpret_cast<float2*>(static_cast<char*>(scratch) + pairs);  // pairs: 8-byte multiple
            cg_normalize_chunks<BLOCK, V, KIND, P><<<dim3((unsigned)chunks, (unsigned)outer), BLOCK, 0, stream>>>(
                x, partial, R, chunk, p);
            cg_normalize_coefficients<BLOCK, KIND, P><<<(unsigned)outer, BLOCK, 0, stream>>>(x, partial, coef, chunks,
                                                                                            R, eps, p);
            cg_normalize_apply<BLOCK, V, KIND, P, E><<<cg_grid(outer * R / V, BLOCK), BLOCK, 0, stream>>>(
                x, y, coef, outer, R, aff, p, e);
            status = cudaGetLastError();
            const cudaError_t freed = cudaFreeAsync(scratch, stream);
            return (int)(status != cudaSuccess ? status : freed);
        } else if (R <= CG_ROW_CACHE) {
            const size_t bytes = sizeof(float) * (size_t)((R + 3) / 4 * 4);
            static size_t allowed = 48 * 1024;  // the default limit; larger needs the opt-in, once per size
            if (bytes > allowed) {
                const cudaError_t status = cudaFuncSetAttribute(cg_normalize_rows<BLOCK, V, KIND, true, P, E>,
                                                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
                if (status != cudaSuccess) return (int)status;
                allowed = bytes;
            }
            cg_normalize_rows<BLOCK, V, KIND, true, P, E><<<cg_grid(outer, 1), BLOCK, bytes, stream>>>(
                x, y, outer, R, eps, aff, p, e);
        } else {
            cg_normalize_rows<BLOCK, V, KIND, false, P, E><<<cg_grid(outer, 1), BLOCK, 0, stream>>>(
                x, y, outer, R, eps, aff, p, e);
        }
    } else {
        cg_normalize_cols<BLOCK, KIND, P, E><<<cg_grid(outer * inner, BLOCK), BLOCK, 0, stream>>>(
            x, y, outer, R, inner, eps, aff, p, e);
    }
    return (int)cudaGetLastError();
}
