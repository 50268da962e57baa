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

The generated C++ file includes `torch/extension.h` first, so g++ can use a precompiled header for
it. cuda_gym keeps its own, outside torch's install and outside any worker's reach (a candidate
must not write what later candidates compile against): the evaluator builds it once per cache
directory (`$CUDA_GYM_PCH_DIR`, `<cache>/pch`) before the first load_inline build, or run
`python -m cuda_gym.eval.fastbuild DIR`. It is a GCC precompiled-header directory,
`DIR/torch-<version>-<install>/torch/extension.h.gch/` (one per torch, since g++ does not notice a
stale .gch), with one variant without -O and one with -O3 (valid for -O1 to -O3):
KernelBench candidates often pass `extra_cflags=["-O3"]`, which a single header built without -O
does not serve (measured on the H200: the C++ file then took 24.3 s instead of 7.8 s). The fast
forms put DIR on the include path before torch's headers; g++ takes the first valid variant. A
forwarding `torch/extension.h` beside the variants sends g++ on to torch's own header whenever it
cannot use one (a second #include, flags no variant matches, a variant still being built): without
it g++ stops with "No such file", which made every split host file that included the header fall
back to the stripped form.

A form that fails to build or import falls through to the next, so a candidate never fails because
of this module; the build directory records the form that worked (`cuda_gym_build_form`), so the
evaluation worker loads the same build without compiling again. Each form builds under its own
extension name (`<name>_split`, `<name>_stripped`, `<name>` as written): torch numbers a name's
builds within a process (`<name>_v1` after a failed attempt), and a name that saw one source only
gets the same library name in the eval worker, which tries only the form that worked.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..buildlock import exclusive_build
from . import inline_split

_EXTENSION_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*[<\"]torch/extension\.h[>\"][ \t]*$", re.M)
_NEEDS_FULL_HEADER = re.compile(r"PYBIND11|\bpy::|torch::nn\b|torch::autograd|torch::jit|torch::python")
# The fast forms build under their own extension names; sources that use the name (other than for
# the pybind module itself) or register ops are built as written only.
_USES_EXTENSION_NAME = re.compile(r"TORCH_LIBRARY|(?<!PYBIND11_MODULE\()\bTORCH_EXTENSION_NAME\b")
FORM_FILE = "cuda_gym_build_form"
PCH_ENV = "CUDA_GYM_PCH_DIR"
PCH_VARIANTS = {"plain": [], "optimized": ["-O3"]}  # g++ flags added to torch's, per variant
# What each load_inline call in this process was built as: {name: "split" | "stripped" | "as_written"}
# plus, under "<name>.not_split", why the split was not used, and under "<name>.<form>_failed", how a
# form that was tried failed. The build worker reports it.
BUILD_FORMS: dict[str, str] = {}


def _sources(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def precompiled_header_root(base: str | os.PathLike) -> Path:
    """Where this torch's precompiled headers live under `base`: one directory per torch version and
    install, since g++ does not notice that a .gch is older than the headers it was made from."""
    import hashlib

    import torch

    install = hashlib.sha256(str(Path(torch.__file__).parent).encode()).hexdigest()[:10]
    return Path(base) / f"torch-{torch.__version__}-{install}"


def _with_precompiled_header(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments with the precompiled-header directory on the include path. Added whether or not
    the headers are there yet (g++ skips what it cannot use), so the build worker and the eval
    worker always pass the same flags and the eval worker never rebuilds."""
    base = os.environ.get(PCH_ENV)
    if not base:
        return arguments
    root = str(precompiled_header_root(base))
    return {**arguments, "extra_include_paths": [*_sources(arguments.get("extra_include_paths")), root]}


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
    inline_split.check_flags(_sources(kwargs.get("extra_cuda_cflags")), _sources(kwargs.get("extra_cflags")))
    if any("{" in inline_split.mask(source) for source in _sources(kwargs.get("cpp_sources"))):
        # Definitions there would share one file with the host wrappers (overloads, macros).
        raise inline_split.NotSplittable("the C++ sources define code, not only declarations")
    split = inline_split.split_cuda_source("\n".join(cuda_sources))
    cpp_sources = ["#include <torch/extension.h>", *_sources(kwargs.get("cpp_sources")), split.host_source]
    return _with_precompiled_header({**kwargs, "name": f"{kwargs.get('name')}_split", "cpp_sources": cpp_sources,
                                     "cuda_sources": [split.kernel_source], "no_implicit_headers": True})


def stripped_arguments(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The arguments with `#include <torch/extension.h>` dropped from the CUDA sources, or None
    when that changes nothing or the sources need the full header."""
    cuda_sources = _sources(kwargs.get("cuda_sources"))
    if not cuda_sources or any(_NEEDS_FULL_HEADER.search(s) for s in cuda_sources):
        return None
    stripped = [_EXTENSION_INCLUDE.sub("", s) for s in cuda_sources]
    if stripped == cuda_sources:
        return None
    return _with_precompiled_header({**kwargs, "name": f"{kwargs.get('name')}_stripped", "cuda_sources": stripped})


def build_forms(kwargs: dict[str, Any], supports_no_implicit_headers: bool = True,
                split: bool = True) -> list[tuple[str, dict[str, Any]]]:
    """The forms to try for one load_inline call, fastest first; the last is the call as written.
    Why the split is not among them is recorded in BUILD_FORMS."""
    forms: list[tuple[str, dict[str, Any]]] = []
    every_source = _sources(kwargs.get("cpp_sources")) + _sources(kwargs.get("cuda_sources"))
    if any(_USES_EXTENSION_NAME.search(source) for source in every_source):
        BUILD_FORMS[f"{kwargs.get('name')}.not_split"] = "the sources use TORCH_EXTENSION_NAME or TORCH_LIBRARY"
        return [("as_written", kwargs)]
    try:
        if split:
            forms.append(("split", split_arguments(kwargs, supports_no_implicit_headers)))
    except inline_split.NotSplittable as exc:
        BUILD_FORMS[f"{kwargs.get('name')}.not_split"] = str(exc)[:200]
    stripped = stripped_arguments(kwargs)
    if stripped is not None:
        forms.append(("stripped", stripped))
    return forms + [("as_written", kwargs)]


FORWARDING_HEADER = """\
// cuda_gym: beside extension.h.gch, the precompiled variants of torch's header. g++ reads this file
// when it cannot use one (a second #include, flags no variant matches, a variant still being built);
// without it g++ would stop here with "No such file" instead of going on to torch's own header.
#include_next <torch/extension.h>
"""


def _write_forwarding_header(path: Path) -> None:
    if path.exists() and path.read_text() == FORWARDING_HEADER:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".extension.h.{os.getpid()}.tmp")
    partial.write_text(FORWARDING_HEADER)
    os.replace(partial, path)


def build_precompiled_headers(base: Path) -> list[str]:
    """Build the precompiled-header variants under `base` (trusted context only: the evaluator, or
    `python -m cuda_gym.eval.fastbuild DIR`); returns the variants built. The flags are the ones
    torch's extension builds use, read from the build.ninja of a trivial extension."""
    import shlex
    import subprocess
    import tempfile

    import torch
    from torch.utils import cpp_extension

    target = precompiled_header_root(base) / "torch" / "extension.h.gch"
    _write_forwarding_header(target.parent / "extension.h")
    missing = [v for v in PCH_VARIANTS if not (target / f"{v}.gch").exists()]
    if not missing:
        return []
    with tempfile.TemporaryDirectory(prefix="cuda-gym-pch-") as build_dir:
        remove = cpp_extension.remove_extension_h_precompiler_headers
        cpp_extension.remove_extension_h_precompiler_headers = lambda: None  # leave torch's own alone
        try:
            cpp_extension.load_inline(name="cuda_gym_pch_flags", cpp_sources="int cuda_gym_pch_flags() { return 0; }",
                                      functions=["cuda_gym_pch_flags"], build_directory=build_dir)
        finally:
            cpp_extension.remove_extension_h_precompiler_headers = remove
        ninja = (Path(build_dir) / "build.ninja").read_text()
    compiler = shlex.split(re.search(r"^cxx = (.*)$", ninja, re.M).group(1))
    flags = [f for f in shlex.split(re.search(r"^cflags = (.*)$", ninja, re.M).group(1))
             if not f.startswith("-DTORCH_EXTENSION_NAME")]
    header = Path(torch.__file__).parent / "include" / "torch" / "extension.h"
    target.mkdir(parents=True, exist_ok=True)
    jobs = {}
    for variant in missing:
        partial = target / f".{variant}.{os.getpid()}.tmp"
        jobs[variant] = (partial, subprocess.Popen([*compiler, "-x", "c++-header", str(header), "-o", str(partial),
                                                    *flags, *PCH_VARIANTS[variant]],
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    for variant, (partial, job) in jobs.items():
        output, _ = job.communicate()
        if job.returncode != 0:
            raise RuntimeError(f"precompiled header {variant} failed: {output[-2000:]}")
        os.replace(partial, target / f"{variant}.gch")  # whole files only: a build never reads half of one
    return missing


def _failure_summary(exc: BaseException, limit: int = 600) -> str:
    """Why a fast form failed, in a few lines: the compiler's first error lines, else the message's end."""
    text = f"{type(exc).__name__}: {exc}"
    errors = [line.strip() for line in text.splitlines() if re.search(r"\berror\b|undefined symbol", line, re.I)]
    return (" | ".join(errors[:3]) if errors else text[-limit:])[:limit]


def _build_directory(arguments: dict[str, Any]) -> str | None:
    """Where torch builds a load or load_inline call: its build_directory, else $TORCH_EXTENSIONS_DIR/<name>
    (set in every worker); None where neither is set."""
    if arguments.get("build_directory"):
        return str(arguments["build_directory"])
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    return os.path.join(root, str(arguments.get("name", ""))) if root else None


def install(split: bool = True) -> None:
    """Route `torch.utils.cpp_extension.load_inline` through the accelerated build, and it and
    `load` through the build directory's flock (buildlock.py) (worker-only; `split=False` only for
    benchmarks comparing the forms)."""
    import inspect

    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    parameters = ("name", "cpp_sources", "cuda_sources")
    supports_no_implicit_headers = "no_implicit_headers" in inspect.signature(original).parameters

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        kwargs = {**dict(zip(parameters, args)), **kwargs}
        build_dir = _build_directory(kwargs)
        # The as-written build's directory records the form that worked; each form has its own.
        form_file = Path(build_dir) / FORM_FILE if build_dir else None
        forms = build_forms(kwargs, supports_no_implicit_headers, split)
        known = form_file.read_text().strip() if form_file and form_file.exists() else None
        if known:  # this candidate was built before: load that build, compile nothing
            forms = [form for form in forms if form[0] == known] or forms
        for index, (form, arguments) in enumerate(forms):
            form_dir = _build_directory(arguments)
            try:
                with exclusive_build(form_dir):
                    module = original(**arguments)
            except Exception as exc:  # noqa: BLE001 - a failed fast form means: try the next, as written last
                if index == len(forms) - 1:
                    raise
                BUILD_FORMS[f"{kwargs.get('name')}.{form}_failed"] = _failure_summary(exc)
                continue
            BUILD_FORMS[str(kwargs.get("name"))] = form
            if form_file and known != form:
                try:
                    form_file.parent.mkdir(parents=True, exist_ok=True)
                    form_file.write_text(form)
                except OSError:
                    pass  # only costs a rebuild in the next process
            return module
        raise AssertionError("unreachable: the last form re-raises")

    original_load = cpp_extension.load
    load_signature = inspect.signature(original_load)

    def load(*args: Any, **kwargs: Any) -> Any:  # cpp_extension.load as it is, under the build's flock
        directory = _build_directory(load_signature.bind_partial(*args, **kwargs).arguments)
        with exclusive_build(directory):
            return original_load(*args, **kwargs)

    # Workers neither build nor delete torch's own precompiled header (use_pch=True/False would).
    cpp_extension._check_and_build_extension_h_precompiler_headers = lambda *args, **kwargs: None
    cpp_extension.remove_extension_h_precompiler_headers = lambda: None
    cpp_extension.load_inline = load_inline
    cpp_extension.load = load


if __name__ == "__main__":
    import sys

    from .sandbox import yield_cpu

    yield_cpu()  # the evaluator may be timing a model meanwhile

    destination = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get(PCH_ENV) or
                       Path.home() / ".cache" / "cuda_gym" / "pch")
    built = build_precompiled_headers(destination)
    print(f"precompiled headers in {destination}: " + (f"built {', '.join(built)}" if built else "built nothing (ready)"))
