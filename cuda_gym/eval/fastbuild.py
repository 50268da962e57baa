"""Faster builds of KernelBench-format (`load_inline`) candidates, without changing what they mean.

A KernelBench candidate includes `torch/extension.h` (all of libtorch's C++ API and pybind11) in
its CUDA source and gets pybind bindings generated into a C++ file that includes it again. Two
changes cut most of that compile time:

- In `cuda_sources`, the `#include <torch/extension.h>` line is dropped: `load_inline` already puts
  `#include <torch/types.h>` (tensors, factories, TORCH_CHECK) in front of CUDA sources, which is
  all a kernel file without Python bindings uses. Sources that use pybind11 or the C++ frontend
  keep the include.
- The generated C++ file includes `torch/extension.h` first, so g++ uses torch's precompiled header
  (`torch/extension.h.gch`) whenever it exists and matches the flags. Workers never build or delete
  it (a candidate must not write what later candidates compile against): build it once, trusted,
  with `python -m cuda_gym.eval.fastbuild`. (A `load_inline(use_pch=False)` call in any other
  process makes torch delete it.)

If the accelerated build fails for any reason, the original call runs unchanged, and the candidate's
build directory remembers that, so a candidate never fails or is rebuilt because of this module.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

_EXTENSION_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"][ \t]*$", re.M)
_NEEDS_FULL_HEADER = re.compile(r"PYBIND11|\bpy::|torch::nn\b|torch::autograd|torch::jit|torch::python")
FALLBACK_MARKER = "cuda_gym_full_build"


def _sources(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def precompiled_header_ready() -> bool:
    """True when torch's precompiled header exists."""
    import torch

    header = Path(torch.__file__).parent / "include" / "torch" / "extension.h.gch"
    return header.exists()


def accelerated_arguments(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The faster arguments for a `load_inline` call, or None when nothing can be sped up."""
    cuda_sources = _sources(kwargs.get("cuda_sources"))
    if not cuda_sources or any(_NEEDS_FULL_HEADER.search(s) for s in cuda_sources):
        return None
    stripped = [_EXTENSION_INCLUDE.sub("", s) for s in cuda_sources]
    return {**kwargs, "cuda_sources": stripped} if stripped != cuda_sources else None


def build_precompiled_header() -> None:
    """Build torch's precompiled header once (trusted context; e.g. `python -m cuda_gym.eval.fastbuild`)."""
    import tempfile

    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory(prefix="cuda-gym-pch-") as build_dir:
        cpp_extension.load_inline(name="cuda_gym_pch_warmup", cpp_sources="int cuda_gym_pch_warmup() { return 0; }",
                                  functions=["cuda_gym_pch_warmup"], build_directory=build_dir, use_pch=True)


def install() -> None:
    """Route `torch.utils.cpp_extension.load_inline` through the accelerated build (worker-only)."""
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    parameters = ("name", "cpp_sources", "cuda_sources")

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        kwargs = {**dict(zip(parameters, args)), **kwargs}
        fast = accelerated_arguments(kwargs)
        marker_dir = kwargs.get("build_directory") or os.path.join(
            os.environ.get("TORCH_EXTENSIONS_DIR", ""), str(kwargs.get("name", "")))
        marker = os.path.join(marker_dir, FALLBACK_MARKER)
        if fast is None or os.path.exists(marker):
            return original(**kwargs)
        try:
            return original(**fast)
        except Exception:  # noqa: BLE001 - any failure of the fast path means: build it as written
            os.makedirs(marker_dir, exist_ok=True)
            Path(marker).touch()
            return original(**kwargs)

    # g++ picks up torch's precompiled header by itself whenever it exists and matches the flags;
    # workers neither build nor delete it (use_pch=True/False would), so candidates cannot touch it.
    cpp_extension._check_and_build_extension_h_precompiler_headers = lambda *args, **kwargs: None
    cpp_extension.remove_extension_h_precompiler_headers = lambda: None
    cpp_extension.load_inline = load_inline


if __name__ == "__main__":
    build_precompiled_header()
    print("torch precompiled header ready:", precompiled_header_ready())
