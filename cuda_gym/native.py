"""The recommended candidate form: kernels without torch headers, called through a thin C ABI.

A candidate writes its kernels as plain CUDA C++ (or C++ for the CPU backend) with `extern "C"`
entry points that take raw pointers and sizes, and lists their prototypes:

    from cuda_gym.native import load_kernels

    lib = load_kernels(
        cuda=r'''
        #include <cuda_runtime.h>
        #include <cstdint>
        __global__ void relu_kernel(const float* x, float* y, int64_t n) { ... }
        extern "C" void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
            relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
        }
        ''',
        functions=["void relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream)"],
    )

    class ModelNew(torch.nn.Module):
        def forward(self, x):
            y = torch.empty_like(x)
            lib.relu_forward(x, y, x.numel())   # tensors pass as pointers, the stream is filled in
            return y

The source is built through `torch.utils.cpp_extension.load` (ninja, the compiler torch was built
with) into a content-addressed cache, so an unchanged kernel is never compiled twice. Because no
torch header is included, a build takes about a second instead of the 10-30 s a `load_inline`
candidate takes through the evaluator (about 60 s as torch builds it).
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

# Calls made through loaded libraries, by function name. The evaluator reads it to check that the
# candidate's own native code ran during the forward (one of several checks, see docs/).
CALL_COUNTS: Counter[str] = Counter()

_SCALAR_TYPES = {
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
    "char": ctypes.c_int8,
    "int8_t": ctypes.c_int8,
    "uint8_t": ctypes.c_uint8,
    "short": ctypes.c_int16,
    "int16_t": ctypes.c_int16,
    "int": ctypes.c_int32,
    "int32_t": ctypes.c_int32,
    "unsigned": ctypes.c_uint32,
    "unsigned int": ctypes.c_uint32,
    "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64,
    "long long": ctypes.c_int64,
    "int64_t": ctypes.c_int64,
    "unsigned long": ctypes.c_uint64,
    "unsigned long long": ctypes.c_uint64,
    "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_size_t,
    "ptrdiff_t": ctypes.c_ssize_t,
}
_STREAM_TYPES = {"cudaStream_t", "CUstream"}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct"}


class KernelSignatureError(ValueError):
    """A prototype in `functions=` could not be understood."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "pointer", "scalar" or "stream"
    ctype: Any


@dataclass(frozen=True)
class Prototype:
    name: str
    returns: Any  # ctypes type or None for void
    params: tuple[Param, ...]

    @property
    def takes_stream(self) -> bool:
        return bool(self.params) and self.params[-1].kind == "stream"


def _parse_type(words: list[str], stars: int, where: str) -> tuple[str, Any]:
    base = " ".join(w for w in words if w not in _QUALIFIERS)
    if stars:
        return "pointer", ctypes.c_void_p
    if base in _STREAM_TYPES:
        return "stream", ctypes.c_void_p
    if base in _SCALAR_TYPES:
        return "scalar", _SCALAR_TYPES[base]
    raise KernelSignatureError(
        f"{where}: unsupported type {base!r}. Use pointers (T*), cudaStream_t, or one of: "
        + ", ".join(sorted(_SCALAR_TYPES))
    )


def _is_type_name(words: list[str]) -> bool:
    base = " ".join(w for w in words if w not in _QUALIFIERS)
    return base in _SCALAR_TYPES or base in _STREAM_TYPES


def _parse_param(raw: str, index: int, function: str) -> Param:
    tokens = re.findall(r"[A-Za-z_]\w*|\*|&", raw)
    if "&" in tokens:
        raise KernelSignatureError(f"{function}: references are not C ABI; use pointers")
    words = [t for t in tokens if t != "*"]
    name = f"arg{index}"
    # A trailing identifier is the parameter's name unless the words alone already form a type.
    if len(words) > 1 and tokens[-1] != "*" and not _is_type_name(words):
        name = words.pop()
    kind, ctype = _parse_type(words, tokens.count("*"), f"parameter {index} of {function}")
    return Param(name, kind, ctype)


def parse_prototype(text: str) -> Prototype:
    """Parse a C prototype such as `void f(const float* x, int64_t n, cudaStream_t s)`."""
    match = re.fullmatch(r"\s*(?:extern\s+\"C\"\s+)?(.+?)\(\s*(.*?)\s*\)\s*;?\s*", text, re.S)
    if not match:
        raise KernelSignatureError(f"not a C prototype: {text!r} (expected 'ret name(type a, ...)')")
    head, arglist = match.groups()
    head_tokens = re.findall(r"[A-Za-z_]\w*|\*", head)
    if len(head_tokens) < 2:
        raise KernelSignatureError(f"prototype needs a return type and a name: {text!r}")
    name = head_tokens[-1]
    ret_tokens = head_tokens[:-1]
    ret_words = [t for t in ret_tokens if t != "*"]
    returns = None
    if ret_words != ["void"] or "*" in ret_tokens:
        kind, returns = _parse_type(ret_words, ret_tokens.count("*"), f"return type of {name}")
        if kind == "stream":
            raise KernelSignatureError(f"{name}: cannot return a stream")
    params: list[Param] = []
    if arglist and arglist != "void":
        for index, raw in enumerate(arglist.split(",")):
            params.append(_parse_param(raw, index, name))
    if any(p.kind == "stream" for p in params[:-1]):
        raise KernelSignatureError(f"{name}: the cudaStream_t parameter must be the last one")
    return Prototype(name, returns, tuple(params))


class NativeFunction:
    """A callable for one `extern "C"` function; converts tensors to pointers and adds the stream."""

    def __init__(self, cfunc: Any, proto: Prototype, device_type: str):
        self._cfunc = cfunc
        self._proto = proto
        self._device_type = device_type
        cfunc.argtypes = [p.ctype for p in proto.params]
        cfunc.restype = proto.returns

    def __call__(self, *args: Any) -> Any:
        proto = self._proto
        params = proto.params
        if proto.takes_stream and len(args) == len(params) - 1:
            args = (*args, None)
        if len(args) != len(params):
            raise TypeError(f"{proto.name}() takes {len(params)} arguments ({len(args)} given)")
        converted = []
        for param, value in zip(params, args):
            if param.kind == "pointer":
                converted.append(self._pointer(param, value))
            elif param.kind == "stream":
                converted.append(self._stream(value))
            else:
                if isinstance(value, torch.Tensor):
                    value = value.item()
                converted.append(value)
        CALL_COUNTS[proto.name] += 1
        return self._cfunc(*converted)

    def _pointer(self, param: Param, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, torch.Tensor):
            if value.device.type != self._device_type:
                raise ValueError(
                    f"{self._proto.name}: argument {param.name!r} is on {value.device}, "
                    f"the kernel expects {self._device_type} tensors"
                )
            if not value.is_contiguous():
                raise ValueError(
                    f"{self._proto.name}: argument {param.name!r} is not contiguous; "
                    "call .contiguous() first (kernels receive a raw pointer)"
                )
            return value.data_ptr()
        if isinstance(value, int):
            return value
        raise TypeError(f"{self._proto.name}: argument {param.name!r} must be a tensor or an int address")

    def _stream(self, value: Any) -> int | None:
        if value is None:
            if self._device_type == "cuda":
                return torch.cuda.current_stream().cuda_stream
            return None
        if isinstance(value, int):
            return value
        return value.cuda_stream


class KernelLibrary:
    """The functions of one built source, as attributes (`lib.relu_forward(...)`)."""

    def __init__(self, path: str, prototypes: Sequence[Prototype], device_type: str):
        self.path = path
        handle = ctypes.CDLL(path)
        self._functions: dict[str, NativeFunction] = {}
        for proto in prototypes:
            try:
                cfunc = getattr(handle, proto.name)
            except AttributeError:
                raise AttributeError(
                    f"function {proto.name!r} is not exported by the built library; declare it "
                    f'extern "C" so its name is not mangled'
                ) from None
            self._functions[proto.name] = NativeFunction(cfunc, proto, device_type)

    def __getattr__(self, name: str) -> NativeFunction:
        try:
            return self.__dict__["_functions"][name]
        except KeyError:
            raise AttributeError(f"kernel library has no function {name!r}") from None

    def __dir__(self) -> list[str]:
        return sorted(self._functions)


@functools.lru_cache(maxsize=1)
def _host_cpu() -> str:
    """The host CPU model and feature flags: builds with -march=native are only valid on it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            lines = [l for l in handle if l.startswith(("model name", "flags"))][:2]
    except OSError:
        return platform.machine()
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:12]


def kernel_cache_dir() -> Path:
    """Where built libraries live: $CUDA_GYM_KERNEL_CACHE or ~/.cache/cuda_gym/kernels."""
    root = os.environ.get("CUDA_GYM_KERNEL_CACHE") or Path.home() / ".cache" / "cuda_gym" / "kernels"
    return Path(root)


_BUILT_MARKER = "cuda_gym_built"


def load_kernels(
    *,
    functions: Sequence[str],
    cuda: str = "",
    cpp: str = "",
    extra_cflags: Sequence[str] = (),
    extra_cuda_cflags: Sequence[str] = (),
    extra_ldflags: Sequence[str] = (),
    verbose: bool = False,
) -> KernelLibrary:
    """Build `cuda` (a .cu source) or `cpp` (a .cpp source) and return its `extern "C"` functions.

    Exactly one of `cuda` / `cpp` must be given. `functions` lists the C prototypes to expose.
    Pointer parameters accept tensors (contiguous, on the kernel's device); a trailing
    `cudaStream_t` parameter may be omitted by the caller and is then the current stream.
    """
    if bool(cuda) == bool(cpp):
        raise ValueError("load_kernels needs exactly one of cuda= (CUDA C++) or cpp= (C++ for the CPU)")
    if not functions:
        raise ValueError("load_kernels needs functions=[...]: the C prototypes to expose")
    prototypes = [parse_prototype(f) for f in functions]
    source, suffix, device_type = (cuda, ".cu", "cuda") if cuda else (cpp, ".cpp", "cpu")
    cflags = ["-O3", *extra_cflags]
    cuda_cflags = ["-O3", *extra_cuda_cflags]
    key = "\0".join([source, suffix, *functions, *cflags, *cuda_cflags, *extra_ldflags, torch.__version__,
                     os.environ.get("TORCH_CUDA_ARCH_LIST", ""), _host_cpu()])
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    name = f"cg_{digest}"
    build_dir = kernel_cache_dir() / name
    built = build_dir / f"{name}.so"
    if (build_dir / _BUILT_MARKER).exists() and built.exists():
        # Built before (the marker is written only after a successful build): load it directly,
        # skipping cpp_extension's source compare and ninja run (~0.3 s per load).
        return KernelLibrary(str(built), prototypes, device_type)
    build_dir.mkdir(parents=True, exist_ok=True)
    source_path = build_dir / f"kernels{suffix}"
    if not source_path.exists() or source_path.read_text() != source:
        tmp = source_path.with_suffix(suffix + f".{os.getpid()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, source_path)
    from torch.utils import cpp_extension

    from .buildlock import exclusive_build

    try:
        with exclusive_build(build_dir):
            library_path = cpp_extension.load(
                name=name,
                sources=[str(source_path)],
                extra_cflags=cflags,
                extra_cuda_cflags=cuda_cflags,
                extra_ldflags=list(extra_ldflags),
                build_directory=str(build_dir),
                is_python_module=False,
                verbose=verbose,
            )
    except OSError as exc:
        # torch reports only "Could not load this library"; the loader's own message names the
        # missing symbol or library.
        try:
            ctypes.CDLL(str(built))
        except OSError as detail:
            raise OSError(f"the kernel library built but could not be loaded: {detail}") from None
        raise exc
    library = KernelLibrary(str(library_path), prototypes, device_type)
    try:
        (build_dir / _BUILT_MARKER).write_text(digest)
    except OSError:
        pass  # only a shortcut for the next load
    return library
