"""Faster builds of KernelBench-format (`load_inline`) candidates, without changing what they mean.

A KernelBench candidate includes `torch/extension.h` (all of libtorch's C++ API and pybind11) in
its CUDA source and gets pybind bindings generated into a C++ file that includes it again. Each
`load_inline` call is built in the first of these forms that succeeds:

1. `split`: the CUDA source is cut into a kernel file without torch headers (nvcc, about a second)
   and host wrappers appended to the C++ file (g++ with torch's precompiled header); see
   `inline_split.py` for what is split and what is refused.
2. `stripped`: the `#include <torch/extension.h>` line is dropped from the CUDA source:
   `load_inline` already puts `#include <torch/types.h>` (tensors, factories, TORCH_CHECK) in front
   of CUDA sources, which is all a kernel file without Python bindings uses. Sources that use
   pybind11 or the C++ frontend keep the include.
3. `as_written`: the original call.

The generated C++ file includes `torch/extension.h` first, so g++ uses torch's precompiled header
(`torch/extension.h.gch`) whenever it exists and matches the flags. Workers never build or delete
it (a candidate must not write what later candidates compile against): build it once, trusted,
with `python -m cuda_gym.eval.fastbuild`. (A `load_inline(use_pch=False)` call in any other
process makes torch delete it.)

A form that fails to build or import falls through to the next, so a candidate never fails because
of this module; the build directory records the form that worked (`cuda_gym_build_form`), so the
evaluation worker loads the same build without compiling again.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import inline_split

_EXTENSION_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"][ \t]*$", re.M)
_NEEDS_FULL_HEADER = re.compile(r"PYBIND11|\bpy::|torch::nn\b|torch::autograd|torch::jit|torch::python")
FORM_FILE = "cuda_gym_build_form"
# What each load_inline call in this process was built as: {name: "split" | "stripped" | "as_written"}
# plus, under "<name>.not_split", why the split was not used. The build worker reports it.
BUILD_FORMS: dict[str, str] = {}


def _sources(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _flags(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


def precompiled_header_ready() -> bool:
    """True when torch's precompiled header exists."""
    import torch

    header = Path(torch.__file__).parent / "include" / "torch" / "extension.h.gch"
    return header.exists()


def split_arguments(kwargs: dict[str, Any], supports_no_implicit_headers: bool = True) -> dict[str, Any]:
    """The arguments of the split build; raises inline_split.NotSplittable with the reason."""
    cuda_sources = _sources(kwargs.get("cuda_sources"))
    if not cuda_sources:
        raise inline_split.NotSplittable("no CUDA sources")
    if not supports_no_implicit_headers:
        raise inline_split.NotSplittable("this torch's load_inline has no no_implicit_headers")
    if kwargs.get("no_implicit_headers") or kwargs.get("sycl_sources"):
        raise inline_split.NotSplittable("no_implicit_headers or SYCL sources given")
    if any(_NEEDS_FULL_HEADER.search(s) for s in cuda_sources):
        raise inline_split.NotSplittable("the CUDA source uses pybind11 or the C++ frontend")
    inline_split.check_flags(_flags(kwargs.get("extra_cuda_cflags")), _flags(kwargs.get("extra_cflags")))
    split = inline_split.split_cuda_source("\n".join(cuda_sources))
    cpp_sources = ["#include <torch/extension.h>", *_sources(kwargs.get("cpp_sources")), split.host_source]
    return {**kwargs, "cpp_sources": cpp_sources, "cuda_sources": [split.kernel_source], "no_implicit_headers": True}


def stripped_arguments(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments with `#include <torch/extension.h>` dropped from the CUDA sources, or None
    when that changes nothing or the sources need the full header."""
    cuda_sources = _sources(kwargs.get("cuda_sources"))
    if not cuda_sources or any(_NEEDS_FULL_HEADER.search(s) for s in cuda_sources):
        return None
    stripped = [_EXTENSION_INCLUDE.sub("", s) for s in cuda_sources]
    return {**kwargs, "cuda_sources": stripped} if stripped != cuda_sources else None


def build_forms(kwargs: dict[str, Any], supports_no_implicit_headers: bool = True,
                split: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The forms to try for one load_inline call, fastest first; the last is the call as written.
    Why the split is not among them is recorded in BUILD_FORMS."""
    forms: list[tuple[str, dict[str, Any]]] = []
    try:
        if split:
            forms.append(("split", split_arguments(kwargs, supports_no_implicit_headers)))
    except inline_split.NotSplittable as exc:
        BUILD_FORMS[f"{kwargs.get('name')}.not_split"] = str(exc)[:200]
    stripped = stripped_arguments(kwargs)
    if stripped is not None:
        forms.append(("stripped", stripped))
    return forms + [("as_written", kwargs)]


def build_precompiled_header() -> None:
    """Build torch's precompiled header once (trusted context; e.g. `python -m cuda_gym.eval.fastbuild`)."""
    import tempfile

    from torch.utils import cpp_extension

    with tempfile.TemporaryDirectory(prefix="cuda-gym-pch-") as build_dir:
        cpp_extension.load_inline(name="cuda_gym_pch_warmup", cpp_sources="int cuda_gym_pch_warmup() { return 0; }",
                                  functions=["cuda_gym_pch_warmup"], build_directory=build_dir, use_pch=True)


def install(split: bool = True) -> None:
    """Route `torch.utils.cpp_extension.load_inline` through the accelerated build (worker-only;
    `split=False` only for benchmarks comparing the forms)."""
    import inspect

    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    parameters = ("name", "cpp_sources", "cuda_sources")
    supports_no_implicit_headers = "no_implicit_headers" in inspect.signature(original).parameters

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        kwargs = {**dict(zip(parameters, args)), **kwargs}
        build_dir = kwargs.get("build_directory") or os.path.join(
            os.environ.get("TORCH_EXTENSIONS_DIR", ""), str(kwargs.get("name", "")))
        form_file = Path(build_dir) / FORM_FILE
        forms = build_forms(kwargs, supports_no_implicit_headers, split)
        known = form_file.read_text().strip() if form_file.exists() else None
        if known:  # this candidate was built before: load that build, compile nothing
            forms = [form for form in forms if form[0] == known] or forms
        for index, (form, arguments) in enumerate(forms):
            try:
                module = original(**arguments)
            except Exception:  # noqa: BLE001 - a failed fast form means: try the next, as written last
                if index == len(forms) - 1:
                    raise
                continue
            BUILD_FORMS[str(kwargs.get("name"))] = form
            if known != form:
                try:
                    form_file.write_text(form)
                except OSError:
                    pass  # only costs a rebuild in the next process
            return module
        raise AssertionError("unreachable: the last form re-raises")

    # g++ picks up torch's precompiled header by itself whenever it exists and matches the flags;
    # workers neither build nor delete it (use_pch=True/False would), so candidates cannot touch it.
    cpp_extension._check_and_build_extension_h_precompiler_headers = lambda *args, **kwargs: None
    cpp_extension.remove_extension_h_precompiler_headers = lambda: None
    cpp_extension.load_inline = load_inline


if __name__ == "__main__":
    build_precompiled_header()
    print("torch precompiled header ready:", precompiled_header_ready())
