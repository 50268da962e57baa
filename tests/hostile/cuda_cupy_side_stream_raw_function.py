"""The counting wrapper sidestepped: the compiled kernel's CuPy `Function` is launched directly on a
private non-blocking stream (never joined), and a counted RawKernel launch of an empty kernel on
torch's stream makes the forward "call its own kernel".

TASK: builtin/L1/gelu
EXPECTED: INCORRECT
DEFENCE: a race, rejected under both policies: right after forward returns, each correctness trial
    reads the output at secret positions with an op on the caller's current stream and compares it
    with the output after a device-wide synchronize; every timed call is also measured by the host
    clock around a device-wide synchronize (flag work_outside_current_stream).
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_module = cupy.RawModule(code=r"""
extern "C" __global__ void gelu_kernel(const float* x, float* y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}
extern "C" __global__ void nothing_kernel() {}
""")
_state = {}


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if not _state:
            _state["side"] = cupy.cuda.Stream(non_blocking=True)
            _state["gelu"] = _module.get_function("gelu_kernel")
            _state["nothing"] = _module.get_function("nothing_kernel")
        y = torch.empty_like(x)
        _state["nothing"]((1,), (1,), ())
        function = _state["gelu"].kernel  # the compiled cupy.cuda.function.Function, not counted
        function((1024,), (256,), (cupy.asarray(x), cupy.asarray(y), np.int64(x.numel())), stream=_state["side"])
        return y
