"""Slowing the PAIRED reference through glibc malloc (EvalConfig.host_pairing=("cpu",)). The
kernel is the honest solution's; every call starts with `mallopt(M_PERTURB, 0)` and ends with
`mallopt(M_PERTURB, 0x55)` (ctypes into libc: no CPython symbol, so the tripwire's dlsym watch
does not fire). It is left on after every call, the trials' too: telling them apart by the
dispatch-mode stack's length is FORBIDDEN under the strict policy.
Until the candidate's next call, glibc fills every block it hands out with 0xAA and every block
it takes back with 0x55: the paired reference pays two extra passes over each of its
intermediates and outputs on every call, the candidate's own calls run with it off. The paired
ratio (reference ms / candidate ms, EvalResult.compared_candidate_ms) grows by the reference's
slowdown. Measured on the 2-core CPU, the reference alone with it on/off in alternation: L1/softmax
1.48x (inside the 2x band, PAIRED_AGREEMENT), L1/gelu 3.1x in a pairing (outside: the band skips
the pairing), L2/conv2d_bias_relu 1.02x (compute-bound). Other process-wide allocator state works the same way and is not a
"switch" either (M_MMAP_THRESHOLD=0 with M_TRIM_THRESHOLD=0: every allocation fresh zero pages,
2.9x on GELU; M_ARENA_MAX; malloc_trim), and so is os.sched_setaffinity of the worker's threads.
Observed (2-core CPU, strict, eager baseline, host_pairing=("cpu",), confirmation on): OK with
paired ratio 1.28 = speedup x1.28 (reward 2), the honest solution right after: x1.035 (reward 1).
The test config (tests/conftest.py TEST_CONFIG) does not pair the CPU, so under the test the trick
is simply not exercised and the file passes as OK_NOT_FASTER.

TASK: builtin/L1/softmax
EXPECTED: OK_NOT_FASTER
DEFENCE: the worker sets M_PERTURB back to its start-up value before every paired call
    (sandbox.reset_malloc_perturb); the threads' CPU sets and the process's priority are watched
    switches (switches.py). The other malloc parameters (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD,
    M_ARENA_MAX) have no getter and are an honest limit (docs/evaluation-policy.md); the structural
    fix is a paired reference in a process the candidate never ran in.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

// exp(x) = 2^n * e^r: n = round(x/ln2) by the 1.5*2^23 trick, |r| <= ln2/2, degree-7 Taylor; 0 below -87.3.
static inline float exp_f(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    float t = xc * 1.44269504088896341f + 12582912.f;
    float n = t - 12582912.f;
    float r = xc - n * 0.693145751953125f - n * 1.428606820309417e-6f;
    float p = 1.f / 5040.f;
    p = p * r + 1.f / 720.f; p = p * r + 1.f / 120.f; p = p * r + 1.f / 24.f;
    p = p * r + 1.f / 6.f; p = p * r + 0.5f; p = p * r + 1.f; p = p * r + 1.f;
    float s = __builtin_bit_cast(float, (__builtin_bit_cast(int32_t, t) - 0x4B400000 + 127) << 23);
    return x < -87.3f ? 0.f : p * s;
}

extern "C" void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols) {
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        #pragma omp simd reduction(max : m)
        for (int64_t c = 0; c < cols; ++c) m = xr[c] > m ? xr[c] : m;
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] = exp_f(xr[c] - m);
        double s = 0.0;
        #pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < cols; ++c) s += yr[c];
        float inv = static_cast<float>(1.0 / s);
        #pragma omp simd
        for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
}
""",
    functions=["void softmax_forward(const float* x, float* y, int64_t rows, int64_t cols)"],
    extra_cflags=["-fopenmp", "-march=native", "-mprefer-vector-width=512"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.size(-1)
        _lib.softmax_forward(x, y, x.numel() // cols, cols)
        return y


# ---- the trick: the honest model, with glibc's malloc perturbation left on between its calls ----
import ctypes as _ctypes

_libc = _ctypes.CDLL("libc.so.6")
_M_PERTURB = -6
_Honest = ModelNew


class ModelNew(_Honest):
    def forward(self, *args):
        _libc.mallopt(_M_PERTURB, 0)
        out = super().forward(*args)
        _libc.mallopt(_M_PERTURB, 0x55)
        return out
