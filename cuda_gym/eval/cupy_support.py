"""CuPy candidates: a `ModelNew` whose kernels are CUDA C++ sources that CuPy compiles with NVRTC
(`cupy.RawKernel`, `cupy.RawModule`) and launches on torch tensors' memory (`cupy.asarray(tensor)`
views it through `__cuda_array_interface__`: no copy).

- Evaluator side: `worker_env` puts CuPy's kernel cache under the evaluator's kernel cache (shared
  by the workers, writable inside their sandbox) and turns CuPy's CUB accelerator off, so that
  CuPy's own reductions run in kernels named by CuPy (`library_kernels` tells them by name).
- Worker side: `count_launches()` (before the tamper check's snapshot, beside
  `native_calls.count_native_calls`) imports CuPy for a candidate that imports it and replaces
  `cupy.RawKernel` and `cupy.RawModule` with subclasses whose launches count as calls of the
  candidate's own native code (`native.CALL_COUNTS["cupy:<kernel>"]`) and go on torch's current
  stream whatever CuPy stream is current, so the race check and the timer see them as they see
  any kernel. The strict policy's rules then apply as they do to CUDA: a forward that never
  launches (a decoy kernel built and not used) is FORBIDDEN, ATen ops during a launch are judged
  by their tensors.
- `library_kernels()`: which kernels of the profiled forward are CuPy's own array operations
  (elementwise, reductions, copies, and for a candidate whose only native code is CuPy kernels,
  every kernel that is neither PyTorch's nor one of its launched kernels, such as cuBLAS under
  `cupy.matmul`). Under the strict policy they are judged as PyTorch compute on the task's data
  is: FORBIDDEN. CuPy's array functions are Cython code that the op recorder cannot see, so they
  are told apart by the kernels they run, in the one profiled forward.
- `report()` / `apply_report()`: launches, the names of the launched kernels, native calls of
  other forms, and the seconds spent compiling (NVRTC on a kernel's first launch, a module's
  first `get_function`), which the evaluator adds to the build time.
"""
from __future__ import annotations

import importlib.util
import math
import os
import time
from pathlib import Path
from typing import Any

from .. import native
from . import native_calls
from .candidate import uses_cupy

LAUNCH_PREFIX = "cupy:"  # the key prefix of CuPy launches in cuda_gym.native.CALL_COUNTS
LIBRARY_PREFIX = "cupy_"  # CuPy names the kernels of its elementwise, reduction and copy routines so
MAX_REPORTED_KERNELS = 50
_perf_counter = time.perf_counter
# Seconds spent compiling, and the kernels launched (module state: a report, never a verdict).
_COMPILED = {"seconds": 0.0, "compiles": 0}
_STREAMS: dict[tuple[int, int], Any] = {}  # CuPy views of torch streams, by (pointer, device)


def available() -> bool:
    """Whether CuPy is installed (`pip install cuda_gym[cuda]`: cupy-cuda13x)."""
    return importlib.util.find_spec("cupy") is not None


def worker_env(cache_dir: str | os.PathLike, backend: str) -> dict[str, str]:
    """Environment of the evaluator's workers: CuPy's kernel cache in the kernel cache, and CuPy's
    reductions in its own kernels rather than CUB's (whose kernel names PyTorch's share)."""
    return {"CUPY_CACHE_DIR": str(Path(cache_dir) / "kernels" / "cupy"), "CUPY_ACCELERATORS": ""}


def _kernel_name(key: str) -> str:
    return key[len(LAUNCH_PREFIX):]


def report() -> dict[str, Any]:
    """What the worker tells the evaluator: CuPy launches so far, the launched kernels' names, calls
    of other native code (load_kernels, load_inline, Triton), and compile seconds."""
    counts = dict(native.CALL_COUNTS)
    ours = {key: n for key, n in counts.items() if str(key).startswith(LAUNCH_PREFIX) and n}
    return {"launches": int(sum(ours.values())),
            "kernels": sorted(_kernel_name(key) for key in ours)[:MAX_REPORTED_KERNELS],
            "other_native_calls": int(sum(n for key, n in counts.items() if key not in ours)),
            "compile_s": round(float(_COMPILED["seconds"]), 4), "compiles": int(_COMPILED["compiles"])}


def apply_report(result: Any, report: Any) -> None:
    """The worker's `report()` into an EvalResult: compile seconds added to the build's."""
    report = report if isinstance(report, dict) else {}
    try:
        seconds = float(report.get("compile_s", 0.0))
    except (TypeError, ValueError):
        seconds = 0.0
    if math.isfinite(seconds) and seconds > 0:  # a report from the candidate's process: a number, never a verdict
        result.compile_seconds = round(result.compile_seconds + seconds, 4)


def _is_launched(kernel: str, launched: list[str]) -> bool:
    """Whether a profiled kernel name is one of the launched kernels: an `extern "C"` kernel appears
    under its own name, a C++ one demangled (`void ns::name<float>(float const*, ...)`)."""
    for name in launched:
        base = name.split("<", 1)[0].strip()
        if base and (kernel == name or kernel == base or kernel.startswith((f"void {base}(", f"void {base}<"))):
            return True
    return False


def library_kernels(kernels: list[str], report: Any, torch_markers: tuple[str, ...]) -> list[str]:
    """The kernels of a profiled forward that CuPy's own array routines ran: every kernel CuPy named
    `cupy_*` that the candidate did not launch itself, and, when the candidate's only native code
    is CuPy kernels, every kernel that is neither PyTorch's (`torch_markers` in its name) nor one
    it launched (cuBLAS under cupy.matmul, cuFFT, CUB ...). `report` is `report()` as the worker
    sent it; where it is missing or malformed only the `cupy_*` rule applies."""
    report = report if isinstance(report, dict) else {}
    launched = [str(k) for k in report.get("kernels", []) if isinstance(k, str)]
    try:
        only_cupy = int(report.get("launches", 0)) > 0 and int(report.get("other_native_calls", 1)) == 0
    except (TypeError, ValueError):
        only_cupy = False
    found = []
    for kernel in kernels:
        if _is_launched(kernel, launched):
            continue
        if kernel.startswith(LIBRARY_PREFIX) or (only_cupy and not any(m in kernel for m in torch_markers)):
            found.append(kernel)
    return found


def _torch_stream(cupy: Any) -> Any:
    """torch's current stream as a CuPy stream (made once per stream)."""
    import torch

    stream = torch.cuda.current_stream()
    key = (int(stream.cuda_stream), int(stream.device_index))
    found = _STREAMS.get(key)
    if found is None:
        found = _STREAMS[key] = cupy.cuda.ExternalStream(key[0], key[1])
    return found


def _launch(kernel: Any, call: Any, name: str, first: bool, args: tuple, kwargs: dict) -> Any:
    """One counted launch on torch's current stream; a first launch (which compiles) is timed."""
    import cupy

    native.CALL_COUNTS[f"{LAUNCH_PREFIX}{name}"] += 1
    started = _perf_counter()
    native_calls.inside_extension[0] += 1
    try:
        with _torch_stream(cupy):
            return call(kernel, *args, **kwargs)
    finally:
        native_calls.inside_extension[0] -= 1
        if first:
            _COMPILED["seconds"] += _perf_counter() - started
            _COMPILED["compiles"] += 1


def _counting_classes(cupy: Any) -> tuple[type, type]:
    """Subclasses of CuPy's RawKernel and RawModule whose launches are counted (CuPy's classes are
    Cython types whose methods cannot be replaced; subclasses can override them)."""
    base_kernel, base_module = cupy.RawKernel, cupy.RawModule
    kernel_call = base_kernel.__call__

    class RawKernel(base_kernel):  # type: ignore[misc, valid-type]
        __doc__ = base_kernel.__doc__

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            first = not self.__dict__.get("_cuda_gym_launched", False)
            self.__dict__["_cuda_gym_launched"] = True
            return _launch(self, kernel_call, self.name, first, args, kwargs)

    class ModuleKernel:
        """A kernel of a RawModule: `get_function`'s RawKernel, its launches counted."""

        __slots__ = ("_kernel", "_name", "_launched")

        def __init__(self, kernel: Any, name: str) -> None:
            # The name as asked for (a name expression such as `scale<float>`), which the profiler
            # shows demangled; the kernel's own `name` is the lowered (mangled) symbol.
            self._kernel, self._name, self._launched = kernel, name, False

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            first, self._launched = not self._launched, True
            return _launch(self._kernel, kernel_call, self._name, first, args, kwargs)

        def __getattr__(self, attribute: str) -> Any:
            return getattr(self._kernel, attribute)

    class RawModule(base_module):  # type: ignore[misc, valid-type]
        __doc__ = base_module.__doc__

        def get_function(self, name: str) -> Any:
            started = _perf_counter()
            try:
                return ModuleKernel(base_module.get_function(self, name), str(name))
            finally:  # the module compiles on its first get_function
                _COMPILED["seconds"] += _perf_counter() - started

    return RawKernel, RawModule


def count_launches(device: str, source: str = "") -> bool:
    """For a candidate `source` that imports CuPy, on the CUDA device: import CuPy and NVRTC now (so
    their code is the evaluator's when the tripwire is armed) and count its RawKernel and
    RawModule launches as calls of the candidate's native code (once per process). False where
    nothing was installed (another device, not a CuPy candidate, CuPy missing or broken)."""
    if device != "cuda" or not uses_cupy(source) or not available():
        return False
    try:
        import cupy
        import cupy._core
        import cupy._core.raw
        import cupy.cuda.compiler  # noqa: F401
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()  # loads libnvrtc now
    except Exception:  # noqa: BLE001 - the candidate's own import then reports what fails
        return False
    if getattr(cupy.RawKernel, "_cuda_gym_counting", False):
        return True
    kernel_class, module_class = _counting_classes(cupy)
    kernel_class._cuda_gym_counting = module_class._cuda_gym_counting = True  # type: ignore[attr-defined]
    for module in (cupy, cupy._core, cupy._core.raw):
        if hasattr(module, "RawKernel"):
            module.RawKernel = kernel_class
        if hasattr(module, "RawModule"):
            module.RawModule = module_class
    return True
