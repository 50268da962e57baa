"""Counting the candidate's calls into its own native code: `count_native_calls()` wraps
`torch.utils.cpp_extension.load_inline/load` so that calls into the modules they return are counted
in `cuda_gym.native.CALL_COUNTS` (beside load_kernels' own counts), and `inside_extension` says how
deep the current call is inside one (the op recorder judges the ATen ops an extension's C++
dispatches by their tensor arguments; triton_support counts Triton launches the same way)."""
from __future__ import annotations

from typing import Any

from .. import native

# How deep the current thread is inside calls of extension-module functions (their C++ may
# dispatch ATen ops, which the recorder judges by their tensor arguments; see OpRecorder).
inside_extension = [0]


class _CountingModule:
    """Proxy for an extension module: calls of its functions are counted."""

    def __init__(self, module: Any):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(object.__getattribute__(self, "_module"), name)
        if callable(attr) and not isinstance(attr, type):
            def counted(*args: Any, **kwargs: Any) -> Any:
                native.CALL_COUNTS[name] += 1
                inside_extension[0] += 1
                try:
                    return attr(*args, **kwargs)
                finally:
                    inside_extension[0] -= 1
            return counted
        return attr


def count_native_calls() -> None:
    """Wrap cpp_extension's loaders so calls into KernelBench-style modules are counted (once)."""
    from torch.utils import cpp_extension

    for loader_name in ("load_inline", "load"):
        original = getattr(cpp_extension, loader_name)
        if getattr(original, "_cuda_gym_counting", False):
            continue

        def wrapped(*args: Any, __original=original, **kwargs: Any) -> Any:
            module = __original(*args, **kwargs)
            return module if isinstance(module, str) or module is None else _CountingModule(module)

        wrapped._cuda_gym_counting = True  # type: ignore[attr-defined]
        setattr(cpp_extension, loader_name, wrapped)


def native_call_total() -> int:
    return sum(native.CALL_COUNTS.values())

