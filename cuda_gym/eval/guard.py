"""Policy enforcement inside the worker: what the candidate's forward dispatched, whether its own
native code ran, and whether it tampered with the process.

- `OpRecorder` records every ATen op the forward dispatches, from Python or from C++ (a dispatch
  mode sees both). Under the strict policy only creation, view and metadata ops are allowed; the
  compute must be the candidate's own (cuBLAS/cuDNN called directly from C++ never reach ATen).
- `count_native_calls()` wraps `torch.utils.cpp_extension.load_inline/load` so calls into the
  modules they return are counted next to `cuda_gym.native.CALL_COUNTS`.
- `TamperCheck` snapshots the identity of functions and the value of flags the evaluation relies on
  and reports any that the candidate changed.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .. import native

CREATION_AND_VIEW_OPS = frozenset({
    # creation (no data from inputs)
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_",
    "scalar_tensor", "lift_fresh", "lift_fresh_copy", "arange", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "expand_as", "t", "transpose", "permute",
    "squeeze", "unsqueeze", "select", "slice", "narrow", "unbind", "split", "split_with_sizes", "chunk",
    "alias", "detach", "view_as", "flatten", "unflatten", "movedim", "numpy_T", "contiguous",
    "item", "_local_scalar_dense", "size", "stride", "numel", "dim", "is_contiguous", "sym_size",
    "sym_stride", "sym_numel", "is_same_size", "record_stream", "_has_compatible_shallow_copy_type",
})
_PYTORCH_NAMESPACES = ("aten", "prims", "prim")


def op_is_allowed(qualified_name: str, policy: str) -> bool:
    """`qualified_name` like 'aten::mm'. Ops of other namespaces are the candidate's own."""
    if policy == "permissive":
        return True
    namespace, _, name = qualified_name.partition("::")
    if namespace not in _PYTORCH_NAMESPACES:
        return True
    return name in CREATION_AND_VIEW_OPS


class OpRecorder(TorchDispatchMode):
    """Counts dispatched ops by qualified name ('aten::mm')."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._schema.name] += 1
        return func(*args, **(kwargs or {}))

    def is_active(self) -> bool:
        return any(mode is self for mode in _get_current_dispatch_mode_stack())


class _CountingModule:
    """Proxy for an extension module: calls of its functions are counted."""

    def __init__(self, module: Any):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(object.__getattribute__(self, "_module"), name)
        if callable(attr) and not isinstance(attr, type):
            def counted(*args: Any, **kwargs: Any) -> Any:
                native.CALL_COUNTS[name] += 1
                return attr(*args, **kwargs)
            return counted
        return attr


def count_native_calls() -> None:
    """Wrap cpp_extension's loaders so calls into KernelBench-style modules are counted."""
    from torch.utils import cpp_extension

    for loader_name in ("load_inline", "load"):
        original = getattr(cpp_extension, loader_name)

        def wrapped(*args: Any, __original=original, **kwargs: Any) -> Any:
            module = __original(*args, **kwargs)
            return module if isinstance(module, str) or module is None else _CountingModule(module)

        setattr(cpp_extension, loader_name, wrapped)


def native_call_total() -> int:
    return sum(native.CALL_COUNTS.values())


class TamperCheck:
    """Remembers what the evaluation relies on; `changes()` lists what differs now."""

    # ATen ops whose kernels the worker's own checks use (comparison, checksums, timing): a
    # candidate that re-registers one of them (torch.library or TORCH_LIBRARY_IMPL) is caught here.
    CHECKED_OPS = ("aten::sub.Tensor", "aten::abs", "aten::max", "aten::sum", "aten::linalg_vector_norm",
                   "aten::isfinite", "aten::count_nonzero", "aten::ne.Tensor", "aten::_to_copy", "aten::copy_",
                   "aten::zero_", "aten::equal", "aten::clone", "aten::index.Tensor", "aten::div.Tensor",
                   "aten::clamp_min", "aten::argmax", "aten::gt.Scalar", "aten::mul.Tensor", "aten::add.Tensor")
    WATCHED_MODULES = ("torch", "torch.cuda", "torch.nn.functional", "time")

    def __init__(self, device: str):
        self.device = device
        self._identities = self._functions()
        self._state = self._flags()
        self._tables = self._dispatch_tables()
        self._modules = self._module_dicts()

    @classmethod
    def _dispatch_tables(cls) -> dict[str, str]:
        return {op: torch._C._dispatch_dump_table(op) for op in cls.CHECKED_OPS}

    @classmethod
    def _module_dicts(cls) -> dict[str, dict[str, int]]:
        import sys

        return {name: {k: id(v) for k, v in vars(sys.modules[name]).items()} for name in cls.WATCHED_MODULES}

    @staticmethod
    def _functions() -> dict[str, int]:
        """id() of each relied-on attribute as stored in its owner (static lookup, so bound
        methods and descriptors compare stably; a rebinding shows up as a different object)."""
        watched = [
            (time, "perf_counter_ns"), (time, "perf_counter"), (torch, "equal"), (torch, "no_grad"),
            (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "elapsed_time"),
            (torch.cuda.Event, "record"), (torch.nn.Module, "__call__"), (torch.nn.Module, "_call_impl"),
            (torch.Tensor, "cpu"), (torch.Tensor, "numpy"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"),
            (torch.Tensor, "__torch_function__"), (torch.Tensor, "__torch_dispatch__"),
        ]
        return {f"{getattr(owner, '__name__', owner)}.{name}": id(vars(owner).get(name)) for owner, name in watched}

    def _flags(self) -> dict[str, Any]:
        state = {
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
            "cuda.matmul.allow_fp16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            "cuda.matmul.allow_bf16_reduced_precision_reduction":
                torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
            "num_threads": torch.get_num_threads(),
            "grad_enabled": torch.is_grad_enabled(),
        }
        if self.device == "cuda":
            state["cuda.current_device"] = torch.cuda.current_device()
            state["cuda.current_stream"] = torch.cuda.current_stream().cuda_stream
        return state

    def changes(self) -> list[str]:
        changed = [name for name, ident in self._functions().items() if ident != self._identities[name]]
        changed += [f"kernel of {op}" for op, table in self._dispatch_tables().items() if table != self._tables[op]]
        for module, before in self._modules.items():
            import sys

            after = {k: id(v) for k, v in vars(sys.modules[module]).items()}
            changed += [f"{module}.{k}" for k in before if after.get(k) != before[k]]
        now = self._flags()
        changed += [f"{key} ({self._state[key]!r} -> {now[key]!r})" for key in now if now[key] != self._state[key]]
        return changed
