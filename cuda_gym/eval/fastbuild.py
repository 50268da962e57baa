"""Faster builds of KernelBench-format (`load_inline`) candidates, without changing what they mean.

A KernelBench candidate includes `torch/extension.h` (all of libtorch's C++ API and pybind11) in
its CUDA source and gets pybind bindings generated into a C++ file that includes it again. Two
changes cut most of that compile time:

- In `cuda_sources`, the `#include <torch/extension.h>` line is dropped: `load_inline` already puts
  `#include <torch/types.h>` (tensors, factories, TORCH_CHECK) in front of CUDA sources, which is
  all a kernel file without Python bindings uses. Sources that use pybind11 or the C++ frontend
  keep the include.
- The generated C++ file is compiled with torch's precompiled header (`use_pch=True`), built once
  per machine and flag set, when torch's include directory is writable. (Any `load_inline` call
  with `use_pch=False`, in any process, makes torch delete that header; it is rebuilt on next use.)

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


def _pch_usable() -> bool:
    import torch

    include_dir = Path(torch.__file__).parent / "include" / "torch"
    return os.access(include_dir, os.W_OK)


def accelerated_arguments(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The faster arguments for a `load_inline` call, or None when nothing can be sped up."""
    changed = dict(kwargs)
    cuda_sources = _sources(kwargs.get("cuda_sources"))
    if cuda_sources and not any(_NEEDS_FULL_HEADER.search(s) for s in cuda_sources):
        stripped = [_EXTENSION_INCLUDE.sub("", s) for s in cuda_sources]
        if stripped != cuda_sources:
            changed["cuda_sources"] = stripped
    if not kwargs.get("use_pch") and _pch_usable():
        changed["use_pch"] = True
    return changed if changed != kwargs else None


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
            return original(**kwargs)  # (use_pch=False also makes torch delete its shared header)

    cpp_extension.load_inline = load_inline
