"""Triton candidates: a `ModelNew` whose forward launches `@triton.jit` kernels.

- Evaluator side: `worker_env` puts Triton's compile cache under the evaluator's kernel cache (which
  build and eval workers may already write, and share) and, on the CPU backend, turns on Triton's
  interpreter (`TRITON_INTERPRET=1`), which runs kernels on CPU tensors: correctness and policies,
  not speed (`INTERPRETED_FLAG`; `reward.pays_for_speed` then pays nothing for speed).
- Worker side: `count_launches()` (before the tamper check's snapshot, like
  `native_calls.count_native_calls`) counts every Triton launch as a call of the candidate's own native
  code, so the strict policy's rules apply as they do to CUDA: a forward that never launches is
  FORBIDDEN, and ATen ops during a launch are judged by their tensors. On the interpreter, CPU
  tensors are handed to the kernel as they are (Triton would copy their storages to the host and
  back with ATen ops, which the op recorder would rightly count as torch work on task data), and
  the autotuner's benchmark runs each configuration once by the host clock (there is no GPU
  driver to time it).
- `report()`: launches and the seconds spent in launches that compiled a kernel (Triton's JIT
  compile, or the interpreter's rewrite, plus that first launch), which the evaluator adds to the
  build time.
"""
from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from .. import native
from . import native_calls
from .candidate import uses_triton
from .reward import TRITON_INTERPRETED_FLAG as INTERPRETED_FLAG

LAUNCH_PREFIX = "triton:"  # the key prefix of Triton launches in cuda_gym.native.CALL_COUNTS
_perf_counter = time.perf_counter
# Seconds in launches that compiled, and the launches that did (module state: a report, never a verdict).
_COMPILED = {"seconds": 0.0, "launches": 0}


def available() -> bool:
    """Whether triton is installed (`pip install cuda_gym[triton]`)."""
    return importlib.util.find_spec("triton") is not None


def worker_env(cache_dir: str | os.PathLike, backend: str) -> dict[str, str]:
    """Environment of the evaluator's workers: Triton's compile cache in the kernel cache (shared by
    the workers, writable inside their sandbox), and the interpreter on the CPU backend."""
    env = {"TRITON_CACHE_DIR": str(Path(cache_dir) / "kernels" / "triton")}
    if backend == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def report() -> dict[str, Any]:
    """What the worker tells the evaluator: Triton launches so far, and compile seconds."""
    launches = sum(n for key, n in native.CALL_COUNTS.items() if str(key).startswith(LAUNCH_PREFIX))
    return {"launches": int(launches), "compile_s": round(float(_COMPILED["seconds"]), 4),
            "compiling_launches": int(_COMPILED["launches"])}


def apply_report(result: Any, report: Any) -> None:
    """The worker's `report()` into an EvalResult: compile seconds added to the build's, and on the
    CPU backend the flag that the timings came from the interpreter (no speed is paid on them)."""
    report = report if isinstance(report, dict) else {}
    try:
        launches, seconds = int(report.get("launches", 0)), float(report.get("compile_s", 0.0))
    except (TypeError, ValueError):
        launches, seconds = 0, 0.0
    if math.isfinite(seconds) and seconds > 0:  # a report from the candidate's process: a number, never a verdict
        result.compile_seconds = round(result.compile_seconds + seconds, 4)
    if result.backend == "cpu" and (launches > 0 or result.language == "triton") and INTERPRETED_FLAG not in result.flags:
        result.flags.append(INTERPRETED_FLAG)


def _all_cpu(value: Any) -> bool:
    """Whether every tensor among a launch's arguments (also inside tuples and descriptors) is on the CPU."""
    if isinstance(value, (tuple, list)):
        return all(_all_cpu(v) for v in value)
    if isinstance(value, dict):
        return all(_all_cpu(v) for v in value.values())
    base = getattr(value, "base", None)
    if base is not None and hasattr(value, "block_shape"):  # a TensorDescriptor
        return _all_cpu(base)
    device = getattr(value, "device", None)
    if hasattr(value, "data_ptr") and device is not None:
        return getattr(device, "type", None) == "cpu"
    return True


def _kernel_cache_size(function: Any) -> int:
    """How many compiled variants a JITFunction holds (over every device)."""
    caches = getattr(function, "device_caches", None) or {}
    try:
        return sum(len(entry[0]) for entry in caches.values())
    except (TypeError, IndexError, AttributeError):
        return 0


def _counted(original: Any, compiled_variants: Any) -> Any:
    """`run` of a Triton kernel class, counted as a native call (warm-up compiles are not launches)."""

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        name = getattr(self, "__name__", None) or getattr(getattr(self, "fn", None), "__name__", "kernel")
        native.CALL_COUNTS[f"{LAUNCH_PREFIX}{name}"] += 1
        before = compiled_variants(self)
        started = _perf_counter()
        native_calls.inside_extension[0] += 1
        try:
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        finally:
            native_calls.inside_extension[0] -= 1
            if compiled_variants(self) != before:
                _COMPILED["seconds"] += _perf_counter() - started
                _COMPILED["launches"] += 1

    run._cuda_gym_counting = True  # type: ignore[attr-defined]
    return run


def _interpreter_bench(kernel_call: Any, quantiles: Any = None, **_: Any) -> Any:
    """The autotuner's benchmark on the interpreter: one call by the host clock (no GPU to time)."""
    started = _perf_counter()
    kernel_call()
    elapsed_ms = (_perf_counter() - started) * 1e3
    return [elapsed_ms] * len(quantiles) if quantiles else elapsed_ms


def _interpret_library(interpreter: Any, jit: Any) -> None:
    """Triton's own @jit library functions (`tl.sum`, `tl.max`, ...) interpreted too: triton was
    imported (by torch) before the worker's environment turned the interpreter on, so they were
    decorated as compiled functions, which an interpreted kernel cannot call."""
    converted: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or name.startswith("triton.language.")):
            continue
        for attribute, value in list(vars(module).items()):
            if type(value) is jit.JITFunction:
                if id(value) not in converted:
                    converted[id(value)] = interpreter.InterpretedFunction(value.fn)
                setattr(module, attribute, converted[id(value)])


def _install_interpreter(interpreter: Any, jit: Any) -> None:
    """On CPU tensors the interpreter runs kernels on the tensors' own memory (no host copies)."""
    _interpret_library(interpreter, jit)
    executor_class = interpreter.GridExecutor

    class InPlaceGridExecutor(executor_class):  # type: ignore[misc, valid-type]
        def _init_args_hst(self, args_dev: Any, kwargs: Any) -> Any:
            if _all_cpu(args_dev) and _all_cpu(kwargs):
                return list(args_dev), dict(kwargs)
            return super()._init_args_hst(args_dev, kwargs)

        def _restore_args_dev(self, args_dev: Any, args_hst: Any, kwargs: Any, kwargs_hst: Any) -> None:
            if _all_cpu(args_dev) and _all_cpu(kwargs):
                return None
            return super()._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    def interpreted_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if warmup:
            return None
        return InPlaceGridExecutor(self.rewrite(), self.arg_names, grid, self.pre_run_hooks)(*args, **kwargs)

    def rewritten(self: Any) -> int:
        return int(self.fn in type(self).rewritten_fn)

    interpreter.InterpretedFunction.run = _counted(interpreted_run, rewritten)


def count_launches(device: str, source: str = "") -> bool:
    """Count Triton launches as calls of the candidate's native code (once per process). Imports
    triton and, for a candidate `source` that imports triton, the CUDA driver module a launch uses
    now, so that their code is the evaluator's when the tripwire is armed. False where triton is
    not installed."""
    if not available():
        return False
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
        from triton.runtime import autotuner, jit
    except Exception:  # noqa: BLE001 - a broken triton install must not fail the native candidates
        return False

    if os.environ.get("TRITON_INTERPRET") == "1":
        from triton.runtime import interpreter

        if not getattr(interpreter.InterpretedFunction.run, "_cuda_gym_counting", False):
            _install_interpreter(interpreter, jit)
        if not isinstance(vars(autotuner.Autotuner).get("do_bench"), property):
            autotuner.Autotuner.do_bench = property(
                lambda self: self._do_bench if self._do_bench is not None else _interpreter_bench)
    else:
        if not getattr(jit.JITFunction.run, "_cuda_gym_counting", False):
            jit.JITFunction.run = _counted(jit.JITFunction.run, _kernel_cache_size)
        if device == "cuda" and uses_triton(source):
            try:
                from triton.runtime import driver

                driver.active.get_current_device()  # loads the CUDA driver module and its launcher now
            except Exception:  # noqa: BLE001 - the candidate's first launch then reports what fails
                pass
    return True
