"""Moving the work into the timer's untimed input loading, through the live input tensor the
timed calls share: the timer copies each timed call's fresh input into the same live tensor object
(`_copy_rotated_into`: `is_contiguous`, `view(-1)`, slices, two `copy_`), outside the timed region.
At the end of each forward the candidate reassigns `x.__class__` to a tensor subclass whose
`__torch_function__` keeps the views it hands out trapped and, after every `copy_` into them,
launches the honest kernel on the now loaded input and stashes it with the
tensor's version counter. The next (timed) forward finds a stash for exactly this version and
returns it after a decoy native kernel (an empty one): every timed output is right (checksums pass), audited calls
run no PyTorch op and do call native code, the correctness trials get fresh tensors and are
computed honestly. The timed call costs microseconds; on CUDA the precompute
kernel ends at the timer's synchronize, before its start event. The CPU twin
(cpu_precompute_in_input_loading) was observed OK, x335 vs eager.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
DEFENCE: every call gets new tensor objects on the live inputs' storage (timing.handles), never the
    objects the judge loads inputs through: the class the candidate sets on what it was given never
    runs inside the judge's own tensor calls, no stash is ever made, and every timed call computes.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r"""
#include <cuda_runtime.h>
#include <cstdint>

#define THREADS 256
#define UNROLL 4

__device__ __forceinline__ float gelu(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__device__ __forceinline__ float4 gelu4(float4 v) {
    return make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
}

// Vector part: n4 float4 elements, each thread handles UNROLL vectors spaced by blockDim (coalesced);
// blocks that lie entirely inside skip the bounds checks. Scalar tail: elements [4 * n4, n)
// (fewer than 4), handled by the first threads of block 0. Idx is int when the sizes allow it.
template <typename Idx>
__global__ void __launch_bounds__(THREADS) gelu_vec_kernel(const float4* __restrict__ x, float4* __restrict__ y,
                                                           Idx n4, const float* __restrict__ xs,
                                                           float* __restrict__ ys, Idx n) {
    const Idx base = (Idx)blockIdx.x * (THREADS * UNROLL) + threadIdx.x;
    float4 v[UNROLL];
    if (base + (UNROLL - 1) * THREADS < n4) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = x[base + u * THREADS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) y[base + u * THREADS] = gelu4(v[u]);
    } else {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (base + u * THREADS < n4) v[u] = x[base + u * THREADS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            if (base + u * THREADS < n4) y[base + u * THREADS] = gelu4(v[u]);
    }
    if (blockIdx.x == 0) {
        const Idx t = 4 * n4 + threadIdx.x;
        if (t < n) ys[t] = gelu(xs[t]);
    }
}

__global__ void __launch_bounds__(THREADS) gelu_scalar_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                              int64_t n) {
    int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    int64_t stride = (int64_t)gridDim.x * THREADS;
    for (; i < n; i += stride) y[i] = gelu(x[i]);
}

__global__ void touch_kernel(const float* x) {}

extern "C" int touch(const float* x, cudaStream_t stream) {
    touch_kernel<<<1, 32, 0, stream>>>(x);
    return (int)cudaGetLastError();
}

extern "C" int gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    bool aligned = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    if (aligned) {
        int64_t n4 = n / 4;
        int64_t per_block = (int64_t)THREADS * UNROLL;
        int64_t blocks = (n4 + per_block - 1) / per_block;
        if (blocks < 1) blocks = 1;  // the tail still needs block 0
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        if (n < ((int64_t)1 << 31) - (int64_t)per_block * 4)
            gelu_vec_kernel<int><<<(unsigned)blocks, THREADS, 0, stream>>>(x4, y4, (int)n4, x, y, (int)n);
        else
            gelu_vec_kernel<int64_t><<<(unsigned)blocks, THREADS, 0, stream>>>(x4, y4, n4, x, y, n);
    } else {
        int64_t blocks = (n + THREADS - 1) / THREADS;
        if (blocks > 132 * 32) blocks = 132 * 32;
        gelu_scalar_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(x, y, n);
    }
    return (int)cudaGetLastError();
}
""",
    functions=["int gelu_forward(const float* x, float* y, int64_t n, cudaStream_t stream)",
               "int touch(const float* x, cudaStream_t stream)"],
)

_stash = {}  # id(live input) -> (tensor, version, output)


def _precompute(x):
    x.__class__ = torch.Tensor
    try:
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        _lib.gelu_forward(x, y, x.numel())
        _stash[id(x)] = (x, x._version, y)
    finally:
        x.__class__ = _Trap


class _Trap(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = torch._C._disabled_torch_function_impl(func, types, args, kwargs or {})
        name = getattr(func, "__name__", "")
        base = getattr(args[0], "_trap_base", None) if args else None
        if base is None:
            return out
        if name in ("view", "__getitem__", "reshape") and type(out) is torch.Tensor:
            out.__class__ = _Trap  # the slices the timer copies into stay trapped
            out._trap_base = base
        elif name == "copy_":
            _precompute(base)  # after each copy: the last one leaves the stash of the loaded input
        return out


class ModelNew(nn.Module):
    def forward(self, x):
        if type(x) is not torch.Tensor:
            x.__class__ = torch.Tensor
        entry = _stash.pop(id(x), None)
        if entry is not None and entry[0] is x and entry[1] == x._version:
            y = entry[2]
            _lib.touch(x)  # decoy: the audited calls see a native call
        else:
            y = torch.empty_like(x, memory_format=torch.contiguous_format)
            _lib.gelu_forward(x, y, x.numel())
        x._trap_base = x
        x.__class__ = _Trap
        return y
