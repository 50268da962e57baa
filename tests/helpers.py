"""Building blocks for test candidates (CPU backend, task builtin/L1/gelu: y = gelu(x))."""
from __future__ import annotations

GELU_TASK = "builtin/L1/gelu"


def native_candidate(body: str, *, python_forward: str | None = None, extra: str = "") -> str:
    """A fast-form CPU candidate for the gelu task whose kernel body is `body`
    (inside `extern "C" void run(const float* x, float* y, int64_t n)`)."""
    forward = python_forward or (
        "        y = torch.empty_like(x)\n"
        "        _lib.run(x, y, x.numel())\n"
        "        return y\n"
    )
    return (
        "import torch\n"
        "import torch.nn as nn\n"
        "from cuda_gym.native import load_kernels\n"
        f"{extra}\n"
        "_lib = load_kernels(cpp=r'''\n"
        "#include <cmath>\n#include <cstdint>\n#include <cstdlib>\n#include <cstring>\n#include <unistd.h>\n"
        'extern "C" void run(const float* x, float* y, int64_t n) {\n'
        f"{body}\n"
        "}\n"
        "''', functions=['void run(const float* x, float* y, int64_t n)'])\n\n"
        "class ModelNew(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n\n"
        "    def forward(self, x):\n"
        f"{forward}"
    )


CORRECT_BODY = "for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));"
