"""Work for the copy engines while the timer holds the SMs: when its stream is idle (warm-up and
open repeats) the forward first spins the host for 0.3 ms, so the timer's hold (3x the open
repeats' host time) lasts about 1 ms; when its stream is busy (a held repeat) it skips the spin and
starts a 64 MB device-to-host copy on a private stream at once. The copy engines run while the
hold fills every SM, so most of the copy is done before the start event; the current stream then
waits for it and runs the kernel. The held window sees only the copy's tail and the kernel.

TASK: builtin/L1/gelu
EXPECTED: OK_NOT_FASTER
NEEDS: held_timing
FLAG: held_timing_not_used
DEFENCE: the open repeats time the copy in full; their median less their host issue time (never
    less than half their median) is far above the held median, so the held repeats are not used and the open time,
    copy and spin included, is reported.
"""
import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cuda=r'''
#include <cuda_runtime.h>
#include <chrono>
#include <cstdint>
__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

extern "C" int gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    static cudaStream_t side = nullptr;
    static cudaEvent_t copied = nullptr;
    static float* host = nullptr;
    const size_t bytes = 64u << 20;
    if (side == nullptr) {
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
        if (cudaMallocHost(&host, bytes) != cudaSuccess) return 1;
    }
    if (cudaStreamQuery(stream) == cudaSuccess) {  // idle: not a held repeat
        auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(300);
        while (std::chrono::steady_clock::now() < until) {}
    }
    size_t count = bytes / sizeof(float) < (size_t)n ? bytes / sizeof(float) : (size_t)n;
    cudaMemcpyAsync(host, x, count * sizeof(float), cudaMemcpyDeviceToHost, side);
    cudaEventRecord(copied, side);
    cudaStreamWaitEvent(stream, copied, 0);
    gelu_kernel<<<1024, 256, 0, stream>>>(x, y, n);
    return (int)cudaGetLastError();
}
''',
    functions=["int gelu(const float* x, float* y, int64_t n, cudaStream_t stream)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        if _lib.gelu(x, y, x.numel()):
            raise RuntimeError("gelu failed")
        return y
