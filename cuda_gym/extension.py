"""CUDA Agent's multi-file layout: `kernels/*.cu` + `kernels/*_binding.cpp` built into `cuda_extension`.

A multi-file candidate is a workdir (the workspace environment's, docs/workspace.md):

    model_new.py                 class ModelNew; `import cuda_extension` and calls its functions
    kernels/<name>.cu            CUDA kernels and their launchers (plain CUDA C++, no torch headers);
                                 on the cpu backend their C++ twins, kernels/<name>.cpp
    kernels/<name>_binding.cpp   the entry points model_new.py calls, each registered with
                                 REGISTER_BINDING from the fixed header kernels/binding_registry.h
    kernels/*.h, *.cuh, *.hpp    headers the sources include (optional)

The binding registry is ours (the header below; the workdir holds a read-only copy). An entry point
is an `extern "C"` function over raw pointers and sizes, as in `cuda_gym.native.load_kernels`; the
macro both defines it and records its prototype, so the Python side learns every entry point from
the built library itself:

    // kernels/softmax_binding.cpp
    #include "binding_registry.h"
    void softmax_launch(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);
    REGISTER_BINDING(void, softmax_forward, (const float* x, float* y, int64_t rows, int64_t cols,
                                             cudaStream_t stream)) {
        softmax_launch(x, y, rows, cols, stream);
    }

    # model_new.py
    import cuda_extension
    ...
        cuda_extension.softmax_forward(x, y, rows, cols)   # tensors pass as pointers; the stream is added

`load_extension(files)` compiles every `kernels/*.cu` and `kernels/*.cpp` (nvcc / the host compiler
through `torch.utils.cpp_extension.load`, fixed flags) into one shared library in the kernel cache
(`cuda_gym.native.kernel_cache_dir()`), keyed by the files' contents, the flags, torch's version,
the CUDA arch list and the host CPU, so an unchanged workdir is never compiled twice. Its functions
are `cuda_gym.native.NativeFunction`s: the same argument conversion, device checks and native-call
counting as the single-file form. `install_extension(files)` builds it and makes `import
cuda_extension` return it; `cuda_gym.eval.candidate.pack_workdir` writes the candidate source that
calls it.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import sys
import types
from pathlib import Path
from typing import Mapping

MODULE_NAME = "cuda_extension"
REGISTRY_HEADER = "kernels/binding_registry.h"
SOURCE_SUFFIXES = (".cu", ".cpp")
HEADER_SUFFIXES = (".h", ".cuh", ".hpp")
# Fixed build flags (the layout has no place for per-candidate flags). OpenMP and the host's vector
# units on the cpu backend; plain -O3 for nvcc (no fast math: results must be exact fp32).
CPU_CFLAGS = ("-O3", "-fopenmp", "-march=native")
CPU_LDFLAGS = ("-fopenmp",)
CUDA_CFLAGS = ("-O3",)
CUDA_NVCC_FLAGS = ("-O3",)
_FILE_NAME = re.compile(r"kernels/[A-Za-z0-9_][A-Za-z0-9_.-]*")

BINDING_REGISTRY_H = r"""// binding_registry.h: cuda_gym's fixed binding registry (read-only; docs/workspace.md).
//
// REGISTER_BINDING(return_type, name, (parameters)) { body }
// defines `extern "C" return_type name(parameters)` and registers its prototype, so model_new.py can
// call it as cuda_extension.name(...). Parameters: pointers (tensors are passed as their data
// pointer; they must be contiguous and on the kernel's device), fixed-size integers, float, double,
// bool, and optionally a trailing cudaStream_t, which the caller may omit (the current stream is
// passed then). References, structs and torch types are not C ABI and are rejected.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#if defined(__CUDACC__) || __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#else
typedef struct CUstream_st* cudaStream_t;  // the cpu backend: no CUDA headers
#endif

// Hidden: one registry per built library, never merged with another loaded library's.
namespace __attribute__((visibility("hidden"))) cuda_gym_binding {
inline std::vector<const char*>& prototypes() {
    static std::vector<const char*> registered;
    return registered;
}
struct Registrar {
    explicit Registrar(const char* prototype) { prototypes().push_back(prototype); }
};
}  // namespace cuda_gym_binding

#define REGISTER_BINDING(ret, name, params)                                                   \
    extern "C" ret name params;                                                              \
    static const ::cuda_gym_binding::Registrar cuda_gym_binding_registrar_##name(#ret " " #name #params); \
    extern "C" ret name params
"""

# Added to every build (not a workdir file): how the Python side reads the registry.
_REGISTRY_QUERY_CPP = r"""#include "kernels/binding_registry.h"
extern "C" int64_t cuda_gym_binding_count() { return (int64_t)cuda_gym_binding::prototypes().size(); }
extern "C" const char* cuda_gym_binding_prototype(int64_t index) { return cuda_gym_binding::prototypes()[index]; }
"""
_BUILT_MARKER = "cuda_gym_built"


class ExtensionError(ValueError):
    """The files do not form a buildable `cuda_extension`; the message says what to change."""


def check_files(files: Mapping[str, str]) -> tuple[list[str], str]:
    """The source files to compile (sorted) and the device their kernels run on ("cuda" when any
    `.cu` is among them, else "cpu"). Raises `ExtensionError` for names outside `kernels/`,
    sub-folders, unknown suffixes, an edited registry header, or no source at all."""
    sources = []
    for name, text in files.items():
        if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
            raise ExtensionError(f"{name!r}: kernel files live directly in kernels/ (letters, digits, '_', '-', '.'; "
                                 "no sub-folders)")
        if not isinstance(text, str):
            raise ExtensionError(f"{name}: the content must be text")
        if name == REGISTRY_HEADER:
            if text != BINDING_REGISTRY_H:
                raise ExtensionError(f"{REGISTRY_HEADER} is the fixed registry and cannot be changed; "
                                     "put your own declarations in another header")
            continue
        if name.endswith(SOURCE_SUFFIXES):
            sources.append(name)
        elif not name.endswith(HEADER_SUFFIXES):
            raise ExtensionError(f"{name}: kernels/ holds sources ({', '.join(SOURCE_SUFFIXES)}) and headers "
                                 f"({', '.join(HEADER_SUFFIXES)}) only")
    if not sources:
        raise ExtensionError("kernels/ has no source file: write kernels/<name>.cu (cpu backend: kernels/<name>.cpp) "
                             "and kernels/<name>_binding.cpp with REGISTER_BINDING entry points")
    if not any(name.endswith("_binding.cpp") for name in sources):
        raise ExtensionError("kernels/ has no *_binding.cpp: register the entry points model_new.py calls with "
                             "REGISTER_BINDING in kernels/<name>_binding.cpp")
    device = "cuda" if any(name.endswith(".cu") for name in sources) else "cpu"
    return sorted(sources), device


def load_extension(files: Mapping[str, str], *, verbose: bool = False) -> types.ModuleType:
    """Build `files` ({"kernels/<name>": text}) and return the `cuda_extension` module.

    Its attributes are the registered entry points (`cuda_gym.native.NativeFunction`). Raises
    `ExtensionError` for a bad layout, the compiler's error (from torch's cpp_extension) when a
    source does not build, and `cuda_gym.native.KernelSignatureError` for an entry point whose
    parameters are not C ABI.
    """
    import torch
    from torch.utils import cpp_extension

    from .buildlock import exclusive_build
    from .native import KernelLibrary, KernelSignatureError, _host_cpu, kernel_cache_dir, parse_prototype

    sources, device = check_files(files)
    cflags, ldflags = (CUDA_CFLAGS, ()) if device == "cuda" else (CPU_CFLAGS, CPU_LDFLAGS)
    contents = {name: text for name, text in files.items() if name != REGISTRY_HEADER}
    key = "\0".join([*(f"{name}\0{contents[name]}" for name in sorted(contents)), BINDING_REGISTRY_H,
                     _REGISTRY_QUERY_CPP, *cflags, *CUDA_NVCC_FLAGS, *ldflags, torch.__version__,
                     os.environ.get("TORCH_CUDA_ARCH_LIST", ""), _host_cpu()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    name = f"cg_ext_{digest}"
    build_dir = kernel_cache_dir() / name
    library_path = build_dir / f"{name}.so"
    if not ((build_dir / _BUILT_MARKER).exists() and library_path.exists()):
        _write_tree(build_dir, {**contents, REGISTRY_HEADER: BINDING_REGISTRY_H,
                                "cuda_gym_registry.cpp": _REGISTRY_QUERY_CPP})
        try:
            with exclusive_build(build_dir):
                cpp_extension.load(name=name, sources=[str(build_dir / s) for s in [*sources, "cuda_gym_registry.cpp"]],
                                   extra_cflags=list(cflags), extra_cuda_cflags=list(CUDA_NVCC_FLAGS),
                                   extra_ldflags=list(ldflags),
                                   extra_include_paths=[str(build_dir), str(build_dir / "kernels")],
                                   build_directory=str(build_dir), is_python_module=False, verbose=verbose)
        except OSError:
            try:  # torch says only "could not load"; the loader names the missing symbol
                ctypes.CDLL(str(library_path))
            except OSError as detail:
                raise OSError(f"cuda_extension built but could not be loaded: {detail}") from None
            raise
        (build_dir / _BUILT_MARKER).write_text(digest)
    handle = ctypes.CDLL(str(library_path))
    handle.cuda_gym_binding_count.restype = ctypes.c_int64
    handle.cuda_gym_binding_prototype.restype = ctypes.c_char_p
    handle.cuda_gym_binding_prototype.argtypes = [ctypes.c_int64]
    texts = [handle.cuda_gym_binding_prototype(i).decode() for i in range(handle.cuda_gym_binding_count())]
    if not texts:
        raise ExtensionError("the kernels built, but no entry point is registered: define each function model_new.py "
                             "calls with REGISTER_BINDING(ret, name, (params)) { ... } in kernels/<name>_binding.cpp")
    prototypes = []
    for text in texts:
        try:
            prototypes.append(parse_prototype(text))
        except KernelSignatureError as exc:
            raise KernelSignatureError(f"REGISTER_BINDING {text}: {exc}") from None
    seen = [p.name for p in prototypes]
    duplicates = sorted({n for n in seen if seen.count(n) > 1})
    if duplicates:
        raise ExtensionError(f"entry points registered more than once: {duplicates}")
    library = KernelLibrary(str(library_path), prototypes, device)
    module = types.ModuleType(MODULE_NAME, "cuda_gym multi-file candidate: " + ", ".join(sorted(seen)))
    module.__file__ = str(library_path)
    for prototype in prototypes:
        setattr(module, prototype.name, getattr(library, prototype.name))
    return module


def install_extension(files: Mapping[str, str]) -> types.ModuleType:
    """`load_extension(files)`, registered as `sys.modules["cuda_extension"]` so that model_new.py's
    `import cuda_extension` (or `from cuda_extension import f`) finds it."""
    module = load_extension(files)
    sys.modules[MODULE_NAME] = module
    return module


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_text() == text:
            continue  # unchanged: keep its timestamp, so ninja does not recompile it
        temporary = path.with_name(path.name + f".{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
