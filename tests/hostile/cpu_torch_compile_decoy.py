"""torch.compile as "the kernel": the forward calls a torch.compile'd copy of the reference (its
generated C++ / Triton kernels are not ATen ops, so an ATen-level recorder sees little) plus a
decoy native call so that "the candidate's own code ran".

TASK: builtin/L1/gelu
EXPECTED: FORBIDDEN
DEFENCE: under the strict policy the eval worker denies TorchDynamo (its frame-evaluation hook is
    replaced by tripwire.Tripwire, and the attempt is recorded): FORBIDDEN. (Also, inductor's
    generated code would still call some ATen ops that the recorder sees.)
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cstdint>
extern "C" void touch(float* y, int64_t n) { if (n > 0) y[0] = y[0]; }
""",
    functions=["void touch(float* y, int64_t n)"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = torch.compile(lambda t: F.gelu(t))

    def forward(self, x):
        y = self.compiled(x)
        _lib.touch(y, 1)
        return y
