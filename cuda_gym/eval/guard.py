"""Policy enforcement inside the worker: what the candidate's forward dispatched, whether its own
native code ran, and whether it tampered with the process.

- `OpRecorder` records every ATen op the forward dispatches, from Python or from C++ (a dispatch
  mode sees both), and where each tensor's data comes from. Under the strict policy creation, view
  and metadata ops are allowed, and so is PyTorch compute on constants (tensors the forward made
  from literals or shapes, moved or cast); compute on the task's data (inputs, parameters, buffers
  and what comes from them) must be the candidate's own (cuBLAS/cuDNN called directly from C++
  never reach ATen). A dispatch mode is thread-local and can be taken off the stack by the code it
  watches, so the recorder also runs the ATen profiler on all threads (RecordFunction, in C++) and
  reports any compute op the profiler saw outside the mode's handling.
- `count_native_calls()` wraps `torch.utils.cpp_extension.load_inline/load` so calls into the
  modules they return are counted next to `cuda_gym.native.CALL_COUNTS`.
- `TamperCheck` arms the `Tripwire` (an audit hook that denies candidate code the introspection
  that reaches the evaluator's own objects: gc, frames, tracers, CPython symbols, code swapping,
  TorchDynamo and the mode stacks that hold the recorder under the strict policy) and snapshots
  what the evaluation relies on: the dicts of
  the modules and classes it calls (torch, time, builtins, numpy, the evaluator's own modules ...),
  ATen dispatch tables, torch mode stacks, precision and threading flags, signal handlers (Python's
  and each signal's native disposition, read with libc's sigaction). Its
  `changes()` lists every difference and every denied attempt.

Everything here runs in the same process as the candidate, so it raises the bar rather than
drawing a hard boundary: native code can still read and write the whole process. See
docs/attack-catalogue.md for what is and is not caught.
"""
from __future__ import annotations

import builtins
import gc
import inspect
import signal
import sys
import threading
import types
import weakref
from collections import Counter
from typing import Any, Callable

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .. import native
from .switches import Switches

CREATION_AND_VIEW_OPS = frozenset({
    # creation (no data from inputs)
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill_", "zero_",
    "scalar_tensor", "lift_fresh", "lift_fresh_copy", "arange", "resize_",
    # views and metadata
    "view", "_unsafe_view", "reshape", "as_strided", "expand", "expand_as", "t", "transpose", "permute",
    "squeeze", "unsqueeze", "select", "slice", "narrow", "unbind", "split", "split_with_sizes", "chunk",
    "alias", "detach", "detach_", "view_as", "flatten", "unflatten", "movedim", "numpy_T", "contiguous",
    "item", "_local_scalar_dense", "size", "stride", "numel", "dim", "is_contiguous", "sym_size",
    "sym_stride", "sym_numel", "is_same_size", "record_stream", "_has_compatible_shallow_copy_type",
})
# Namespaces of the ops PyTorch itself registers (those that exist when the evaluator starts, before
# any candidate code): an op of another namespace is the candidate's own (its TORCH_LIBRARY).
# `profiler::` ops only open and close record_function ranges.
_PYTORCH_NAMESPACES = frozenset({"aten", "prims", "prim"} | {
    name.partition("::")[0] for name in torch._C._dispatch_get_all_op_names()}) - {"profiler"}
# Composite ops that the dispatch mode never sees (they decompose above it) and that are no-ops
# when nothing is converted; the profiler reports them as leaves then.
_PROFILER_NOOP_WRAPPERS = frozenset({"to", "type_as", "contiguous", "reshape", "flatten", "view_as",
                                     "resolve_conj", "resolve_neg"})
# The profiler event under each op the dispatch mode handled (its `__torch_dispatch__`).
_MODE_EVENT = "PythonDispatchMode"
# Pseudo-ops the recorder reports when the profiler cross-check itself was interfered with.
PROFILER_STOPPED = "aten::<profiler stopped or restarted during the forward>"
PROFILER_FAILED = "aten::<op profiler failed>"

# ---- data flow (the strict policy's notion of "compute on the task's data")
# Ops that read only the shape, dtype and device of their tensor arguments, never their values.
_SHAPE_ONLY_OPS = frozenset({
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
    "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full", "size", "stride", "numel",
    "dim", "is_contiguous", "sym_size", "sym_stride", "sym_numel", "is_same_size",
    "_has_compatible_shallow_copy_type", "record_stream",
})
# Ops whose result is uninitialised memory, which may still hold freed task data.
_UNINITIALISED_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                                "empty_permuted", "resize_"})
# In-place ops that overwrite `self` without reading it.
_OVERWRITE_OPS = frozenset({"copy_", "fill_", "zero_"})
# Ops that read data from outside the process's tensors (a file): never constants.
_EXTERNAL_DATA_OPS = frozenset({"from_file"})
# Ops that bring a tensor's values to the host as Python numbers.
_HOST_READ_OPS = frozenset({"_local_scalar_dense", "item"})
# Tensor methods (seen by a TorchFunctionMode, not by the dispatch mode: on the CPU they dispatch
# nothing) that hand a tensor's values to Python, or its memory to code the recorder cannot see.
_HOST_READ_METHODS = frozenset({"tolist", "item", "__float__", "__int__", "__index__", "__bool__",
                                "__complex__", "__repr__", "__str__", "__format__", "__reduce_ex__"})
_MEMORY_METHODS = frozenset({"numpy", "__array__", "__dlpack__", "data_ptr", "untyped_storage", "storage",
                             "_typed_storage", "__cuda_array_interface__"})
_PYTHON_NUMBERS = (bool, int, float, complex)
_CONSTANT = "constant"  # the mark of a storage that holds a constant
# OpRecorder attributes that change while it records (the others must stay the objects they were).
_RECORDER_CHANGING = frozenset({"closed_by", "_vouched", "_native_calls", "_after_native", "_labelled", "_entered"})
_UNKNOWN_ORIGIN = "a tensor not made in this forward"

# Captured before any candidate code runs (TamperCheck would report rebinding them anyway).
_no_torch_function = torch._C.DisableTorchFunction
_torch_function_mode_enabled = torch._C._is_torch_function_mode_enabled
_function_stack_len = torch._C._len_torch_function_stack
_function_stack_at = torch._C._get_function_stack_at
_TENSOR_FROM_DATA = (torch.tensor, torch.as_tensor, torch.asarray)
_CUDA_ARRAY_INTERFACE = torch.Tensor.__dict__.get("__cuda_array_interface__")
_tree_leaves = pytree.tree_leaves


def op_is_allowed(qualified_name: str, policy: str) -> bool:
    """`qualified_name` is a key of `OpRecorder.ops`: an op ('aten::mm'), or a PyTorch compute op on
    the task's data ('aten::mm on input 0 (task data: forward input x)'), which the strict policy
    never allows. Ops of other namespaces are the candidate's own; creation, view and metadata ops
    are allowed whatever they are called on."""
    if policy == "permissive":
        return True
    op = qualified_name.split(" ", 1)[0]
    namespace, _, name = op.partition("::")
    if namespace not in _PYTORCH_NAMESPACES:
        return True
    return op == qualified_name and name in CREATION_AND_VIEW_OPS


def _start_profiler() -> Any:
    """An ATen-op profiler over all threads, or None where another profiler is already active."""
    if torch.autograd._profiler_enabled():
        return None
    from torch._C._profiler import _ExperimentalConfig

    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      experimental_config=_ExperimentalConfig(profile_all_threads=True))
    profiler.__enter__()
    return profiler


def _python_numbers_only(data: Any) -> bool:
    """Whether `data` is a Python number or nested lists/tuples of them (no tensors, no arrays)."""
    stack = [data]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind in (list, tuple, torch.Size):
            stack.extend(value)
        elif kind not in _PYTHON_NUMBERS:
            return False
    return True


def _storage_of(tensor: torch.Tensor) -> Any:
    """The tensor's untyped storage, or None (sparse tensors, wrapper subclasses ...)."""
    try:
        return torch.Tensor.untyped_storage(tensor)
    except Exception:  # noqa: BLE001
        return None


def _covers_storage(tensor: torch.Tensor, storage: Any) -> bool:
    try:
        return (tensor.storage_offset() == 0 and tensor.is_contiguous()
                and tensor.numel() * tensor.element_size() == storage.nbytes())
    except Exception:  # noqa: BLE001
        return False


class _StorageMarks:
    """A mark per storage (`_CONSTANT` or the origin of its task data) that holds only while that
    storage lives, so a new storage at the same address starts unmarked. The weak references carry
    no callback: a callback's closure would lead from the storage (`weakref.getweakrefs`) to the
    marks, which candidate code could then rewrite."""

    def __init__(self) -> None:
        self._marks: dict[int, tuple[weakref.ref, str]] = {}
        self._purge_at = 1024

    def get(self, storage: Any) -> str | None:
        entry = self._marks.get(storage._cdata) if storage is not None else None
        return entry[1] if entry is not None and entry[0]() is storage else None

    def set(self, storage: Any, mark: str) -> None:
        if storage is None:
            return
        key, marks = storage._cdata, self._marks
        entry = marks.get(key)
        if entry is not None and entry[0]() is storage:
            marks[key] = (entry[0], mark)
            return
        marks[key] = (weakref.ref(storage), mark)
        if len(marks) >= self._purge_at:  # entries of freed storages
            for stale in [k for k, (ref, _) in marks.items() if ref() is None]:
                del marks[stale]
            self._purge_at = max(1024, 2 * len(marks))

    def constants_to(self, origin: str) -> None:
        """Every constant becomes task data of `origin`."""
        for key, (ref, mark) in list(self._marks.items()):
            if mark == _CONSTANT:
                self._marks[key] = (ref, origin)


class _HostReadWatch(TorchFunctionMode):
    """The recorder's companion on the torch-function stack: it sees the Tensor methods that read
    values to the host or hand out memory without dispatching an ATen op (`tolist`, `numpy`,
    `data_ptr`, ...), and vouches for `torch.tensor(...)` of Python numbers."""

    def __init__(self, recorder: "OpRecorder") -> None:
        super().__init__()
        self.recorder = recorder
        self.depth = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.depth += 1
        vouched = False
        try:
            with _no_torch_function():
                vouched = self.recorder._before_function(func, args, kwargs)
            self.recorder._vouched += vouched
            return func(*args, **kwargs)
        finally:
            self.recorder._vouched -= vouched
            self.depth -= 1


class OpRecorder(TorchDispatchMode):
    """Records what the forward dispatched and which of it computed on the task's data.

    Task data is the forward's inputs, the module's parameters and buffers, any other tensor not made
    in this forward, and everything computed, copied or viewed from them. Constants are tensors the
    forward makes from literals or shapes (`zeros`, `ones`, `full`, `arange`, `tensor(...)` of Python
    numbers) and whatever is computed from constants alone (`.to(device)`, a dtype cast, arithmetic).
    Marks live on storages, so views share them and an in-place write, `copy_` or `out=` from task
    data turns a constant into task data. Conservative on purpose:

    - `empty*` memory is uninitialised (it may hold freed task data) until `fill_`/`zero_`/`copy_`
      of constants overwrites the whole storage;
    - a call into native code (load_kernels or load_inline functions) got pointers, so every constant
      made before it counts as task data; ATen ops that an extension's C++ dispatches during the
      call are judged by their tensor arguments (values its C++ reads from raw memory are invisible,
      as everything native code does is); once the call has returned to Python, no constant can be
      made any more (native code may have left task data in host memory as Python numbers);
    - likewise once task data has been read to the host (`item`, `tolist`, `numpy`, printing,
      `data_ptr` ...), once one of the candidate's own ops ran, once torch-function handling
      was seen off (the watch that sees host reads is then blind), and once an op came from C++
      outside an extension call (TorchScript: the watch does not see that code either). Ops an
      extension's C++ dispatches during the call arrive without a torch function; with the watch
      still live they are judged by their tensors like any other;
    - `torch.tensor(...)` makes a constant only from Python numbers (not from arrays or buffers).

    `ops` counts, by key: creation, view and metadata ops and ops of other namespaces by name
    ('aten::zeros'); PyTorch compute ops on task data by op, argument and origin ('aten::_to_copy on
    input 0 (task data: forward input x)'); after the block, the ATen compute ops the all-threads
    profiler saw that the mode did not (hidden with `_disable_current_modes`, run on another thread,
    nested in the candidate's own ops), by name, and a pseudo-op if the profiler was stopped.
    `op_is_allowed` judges these keys. `constant_ops` counts the compute ops on constants alone
    (allowed)."""

    def __init__(self, cross_check: bool = True) -> None:
        """`cross_check=False`: no all-threads profiler beside the mode (the timer's audits: a
        profiler session leaves host overhead in the process that would be timed afterwards)."""
        super().__init__()
        self.cross_check = cross_check
        self.ops: Counter[str] = Counter()
        self.constant_ops: Counter[str] = Counter()
        self.hidden_ops: Counter[str] = Counter()
        self.closed_by = ""  # why constants stopped being trusted during the block ("" while they are)
        self._marks = _StorageMarks()
        self._watch = _HostReadWatch(self)
        self._vouched = 0
        self._native_calls = 0
        self._after_native = False
        self._labelled = False
        self._hook: Any = None
        self._profiler: Any = None
        self._sentinel = ""
        self._entered: tuple = ()

    # ------------------------------------------------------------------ data flow
    def _origin(self, tensor: Any) -> str | None:
        """None for a constant; else where the tensor's task data came from."""
        if not isinstance(tensor, torch.Tensor):
            return None
        mark = self._marks.get(_storage_of(tensor))
        if mark == _CONSTANT:
            # Closing turns every constant into task data and marks nothing constant afterwards.
            return f"a constant mark set after {self.closed_by} (not by the recorder)" if self.closed_by else None
        return mark or (f"{_UNKNOWN_ORIGIN}, after {self.closed_by}" if self.closed_by else _UNKNOWN_ORIGIN)

    def _close(self, reason: str) -> None:
        """From now on nothing is a constant."""
        if not self.closed_by:
            self.closed_by = reason
            self._marks.constants_to(f"a constant made before {reason}")

    def _watch_is_live(self) -> bool:
        """Whether Python code calling torch now would pass through the watch: torch-function
        handling on and the watch on the mode stack. (Call it before `_no_torch_function()`.)"""
        return _torch_function_mode_enabled() and any(
            _function_stack_at(i) is self._watch for i in range(_function_stack_len()))

    def _check_trust(self, watch_live: bool) -> None:
        """`watch_live`: `_watch_is_live()` as it was when the op or function arrived."""
        if self.closed_by:
            return
        calls = sum(native.CALL_COUNTS.values())
        if calls != self._native_calls:  # native code got pointers: it may have written any constant
            self._native_calls = calls
            self._marks.constants_to("a constant made before a call into native code")
            self._after_native = True
        if self._after_native and not _inside_extension[0]:
            # Back in Python: values native code left in host memory look like Python numbers.
            self._close("a call into native code returned")
        elif self._watch.depth:
            return  # the op comes from a torch function the watch is handling
        elif not watch_live:
            self._close("torch-function handling was turned off (the host-read watch was blind)")
        elif not _inside_extension[0]:
            # Dispatched from C++ that Python code reached without a torch function (TorchScript,
            # for one), whose host reads (`tolist`) the watch does not see either.
            self._close("an op dispatched from C++ outside the candidate's extension calls (the host-read "
                        "watch does not see that code)")
        # else: dispatched by an extension's own C++ during the call; what it reads from raw memory
        # is invisible as everything native code does is, and its ATen ops are judged by their tensors.

    def _before_function(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """The watch's view of one torch function; True when it vouches for a tensor made from data."""
        self._check_trust(True)
        if func in _TENSOR_FROM_DATA:
            data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
            return not self.closed_by and _python_numbers_only(data)
        name = getattr(func, "__name__", "")
        if _CUDA_ARRAY_INTERFACE is not None and getattr(func, "__self__", None) is _CUDA_ARRAY_INTERFACE:
            name = "__cuda_array_interface__"
        if name not in _HOST_READ_METHODS and name not in _MEMORY_METHODS:
            return False
        for value in args[:1]:
            if not isinstance(value, torch.Tensor):
                continue
            origin = self._origin(value)
            if origin is not None:
                self._close(f"Tensor.{name} on task data ({origin})")
            elif name in _MEMORY_METHODS:
                self._marks.set(_storage_of(value), f"a constant whose memory Tensor.{name} handed out")
        return False

    def _label_task_data(self, module: Any, args: tuple) -> None:
        """Names the top-level module's inputs, parameters and buffers for the messages."""
        self._labelled = True
        try:
            names = [p.name for p in inspect.signature(module.forward).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = []
        for index, value in enumerate(args):
            name = names[index] if index < len(names) else f"#{index}"
            for leaf in _tree_leaves(value):
                if isinstance(leaf, torch.Tensor):
                    self._marks.set(_storage_of(leaf), f"forward input {name}")
        for kind, named in (("parameter", module.named_parameters), ("buffer", module.named_buffers)):
            for name, tensor in named():
                if self._marks.get(_storage_of(tensor)) is None:
                    self._marks.set(_storage_of(tensor), f"{kind} {name}")

    def _forward_pre_hook(self, module: Any, args: tuple) -> None:
        """The first module forward in the block (the worker's call of the model) names the task
        data, and the hook removes itself before any candidate code runs: torch's global hook dict
        would otherwise hand the recorder to a hook of the candidate's."""
        self._hook.remove()
        if not self._labelled:
            with _no_torch_function():
                self._label_task_data(module, args)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        try:
            watch_live = bool(self._watch.depth) or self._watch_is_live()
            with _no_torch_function():
                judged = self._judge(func, name, args, kwargs, watch_live)
        except Exception as exc:  # noqa: BLE001 - never break the forward; judge it conservatively
            judged = self._lost_track(name, exc)
        out = func(*args, **kwargs)
        try:
            with _no_torch_function():
                self._mark_results(name, judged, args, kwargs, out)
        except Exception as exc:  # noqa: BLE001
            self._close(f"the recorder lost track of the data flow at {name} ({type(exc).__name__})")
        return out

    def _lost_track(self, name: str, exc: BaseException) -> tuple:
        """Judging one op failed: nothing is a constant any more, and a compute op counts as compute
        on task data."""
        reason = f"the recorder lost track of the data flow at {name} ({type(exc).__name__})"
        self._close(reason)
        self.ops[name if op_is_allowed(name, "strict") else f"{name} (task data: {reason})"] += 1
        return reason, []

    def _judge(self, func: Any, name: str, args: tuple, kwargs: dict, watch_live: bool) -> tuple:
        """Counts the op; returns (origin of the task data it reads or None, written tensors)."""
        self._check_trust(watch_live)
        namespace, _, short = name.partition("::")
        if namespace == "profiler":  # record_function ranges: neither PyTorch compute nor the candidate's
            self.ops[name] += 1
            return None, []
        pytorch = namespace in _PYTORCH_NAMESPACES
        written: list[torch.Tensor] = []
        read: list[tuple[str, Any]] = []
        arguments = func._schema.arguments
        for index, value in enumerate(args):
            schema = arguments[index] if index < len(arguments) else None
            is_write = bool(schema is not None and schema.alias_info is not None and schema.alias_info.is_write)
            leaves = [v for v in _tree_leaves(value) if isinstance(v, torch.Tensor)]
            if is_write:
                written += leaves
            if not (is_write and index == 0 and short in _OVERWRITE_OPS) and short not in _SHAPE_ONLY_OPS:
                read += [(f"input {index}", v) for v in leaves]
        by_name = {a.name: a for a in arguments}
        for key, value in kwargs.items():
            schema = by_name.get(key)
            leaves = [v for v in _tree_leaves(value) if isinstance(v, torch.Tensor)]
            if schema is not None and schema.alias_info is not None and schema.alias_info.is_write:
                written += leaves  # out= arguments are written, not read
            elif short not in _SHAPE_ONLY_OPS:
                read += [(f"argument {key}", v) for v in leaves]
        tainted = next(((where, origin) for where, origin in ((w, self._origin(v)) for w, v in read)
                        if origin is not None), None)
        if pytorch and short in _HOST_READ_OPS and tainted is not None:
            self._close(f"{name} read task data to the host ({tainted[1]})")
        if not pytorch or short in CREATION_AND_VIEW_OPS:
            self.ops[name] += 1
        elif tainted is not None:
            self.ops[f"{name} on {tainted[0]} (task data: {tainted[1]})"] += 1
        elif self.closed_by and not read:
            self.ops[f"{name} (task data: Python values, after {self.closed_by})"] += 1
        else:
            self.constant_ops[name] += 1
        if not pytorch:
            self._close(f"a call of the candidate's own op {name}")
        return tainted[1] if tainted else None, written

    def _mark_results(self, name: str, judged: tuple, args: tuple, kwargs: dict, out: Any) -> None:
        origin, written = judged
        namespace, _, short = name.partition("::")
        if namespace == "profiler":
            return
        if namespace not in _PYTORCH_NAMESPACES:
            origin = origin or f"the result of the candidate's own op {name}"
        elif short in _UNINITIALISED_OPS:
            origin = origin or f"uninitialised memory ({name})"
        elif short in _EXTERNAL_DATA_OPS:
            origin = origin or f"data read by {name}"
        elif self.closed_by:
            origin = origin or f"made after {self.closed_by}"
        argument_storages = set()
        for value in _tree_leaves((args, kwargs)):
            if isinstance(value, torch.Tensor):
                storage = _storage_of(value)
                if storage is not None:
                    argument_storages.add(storage._cdata)
        if short in ("lift_fresh", "lift_fresh_copy"):  # torch.tensor(...) lifts what it made from the data
            if self.closed_by:
                origin = f"made after {self.closed_by}"
            elif self._vouched:
                origin = None
            elif origin is None or origin == _UNKNOWN_ORIGIN:
                origin = f"data that {name} got from something other than Python numbers (an array, a buffer)"
            if short == "lift_fresh" and args and isinstance(args[0], torch.Tensor):
                self._marks.set(_storage_of(args[0]), origin or _CONSTANT)  # it returns its argument
        for tensor in written:
            storage = _storage_of(tensor)
            if origin is not None:
                self._marks.set(storage, origin)
            elif short in _OVERWRITE_OPS and _covers_storage(tensor, storage):
                self._marks.set(storage, _CONSTANT)
        for tensor in _tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = _storage_of(tensor)
            if storage is None or storage._cdata in argument_storages:
                continue  # a view or an in-place result: its storage keeps its mark
            self._marks.set(storage, origin or _CONSTANT)

    # ------------------------------------------------------------------ the block
    def __enter__(self):
        unobserved = _observer_flags() if Tripwire._armed is not None and Tripwire._armed._mode_access_denied else []
        try:
            self._profiler = _start_profiler() if self.cross_check else None
            if self._profiler is not None:
                import secrets

                self._sentinel = f"cuda_gym_sentinel_{secrets.token_hex(8)}"
                with torch.autograd.profiler.record_function(self._sentinel):
                    pass
        except Exception:  # noqa: BLE001 - the dispatch mode still records
            self._profiler = None
            self.ops[PROFILER_FAILED] += 1
        self._native_calls = sum(native.CALL_COUNTS.values())
        self._hook = torch.nn.modules.module.register_module_forward_pre_hook(self._forward_pre_hook)
        hooks = torch.nn.modules.module._global_forward_pre_hooks
        if hasattr(hooks, "move_to_end"):
            hooks.move_to_end(self._hook.id, last=False)  # before any hook of the candidate's
        self._entered = (dict(vars(self)), dict(vars(self._watch)), self._marks._marks)
        self._watch.__enter__()
        entered = super().__enter__()
        for module, name, value in unobserved:  # set back on exit by TorchDispatchMode and the profiler
            setattr(module, name, value)
        return entered

    def __exit__(self, exc_type, exc, tb):
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            try:
                if any(_function_stack_at(i) is self._watch for i in range(_function_stack_len())):
                    self._watch.__exit__(None, None, None)
            finally:
                self._hook.remove()
                self._finish_profiler()

    def is_active(self) -> bool:
        """Whether the recorder is on the dispatch-mode stack with its own state: no attribute of
        it or of its watch rebound, added or deleted since it was entered (what its counters and
        marks hold is not checked: see docs/attack-catalogue.md)."""
        if not any(mode is self for mode in _get_current_dispatch_mode_stack()):
            return False
        entered = vars(self).get("_entered")
        if not isinstance(entered, tuple) or len(entered) != 3:
            return False
        mine, watch, marks = entered
        now = vars(self)
        if set(now) != set(mine) or any(now[key] is not value for key, value in mine.items()
                                        if key not in _RECORDER_CHANGING):
            return False
        now_watch = vars(self._watch)
        if set(now_watch) != set(watch) or now_watch.get("recorder") is not self:
            return False
        return type(self._marks) is _StorageMarks and self._marks._marks is marks

    def _finish_profiler(self) -> None:
        """Adds the ATen compute ops the profiler saw that the mode did not: an op the mode handled
        has a 'PythonDispatchMode' child, and what runs inside that handling of a PyTorch op is the
        op's own implementation. Everything else (on another thread, under `_disable_current_modes`,
        nested in the candidate's own ops) is judged by name; composites by their compute leaves."""
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return
        try:
            profiler.__exit__(None, None, None)
            events = list(profiler.events())
        except Exception:  # noqa: BLE001
            self.ops[PROFILER_STOPPED] += 1
            return
        if not any(e.name == self._sentinel for e in events):
            self.ops[PROFILER_STOPPED] += 1

        def is_compute(event: Any) -> bool:
            namespace, _, short = event.name.partition("::")
            return (namespace in _PYTORCH_NAMESPACES and not op_is_allowed(event.name, "strict")
                    and short not in _PROFILER_NOOP_WRAPPERS)

        handled, has_compute_child = set(), set()
        for event in events:
            parent = event.cpu_parent
            if parent is None:
                continue
            if event.name == _MODE_EVENT:
                handled.add(id(parent))
            elif is_compute(event):
                has_compute_child.add(id(parent))
        for event in events:
            if not is_compute(event) or id(event) in handled or id(event) in has_compute_child:
                continue
            child, parent = event, event.cpu_parent
            while parent is not None and not (child.name == _MODE_EVENT and parent.name.partition("::")[0]
                                              in _PYTORCH_NAMESPACES):
                child, parent = parent, parent.cpu_parent
            if parent is None:  # not inside the mode's handling of a PyTorch op
                self.hidden_ops[event.name] += 1
        for name, count in self.hidden_ops.items():
            self.ops[name] += count


# How deep the current thread is inside calls of extension-module functions (their C++ may
# dispatch ATen ops, which the recorder judges by their tensor arguments; see OpRecorder).
_inside_extension = [0]


class _CountingModule:
    """Proxy for an extension module: calls of its functions are counted."""

    def __init__(self, module: Any):
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(object.__getattribute__(self, "_module"), name)
        if callable(attr) and not isinstance(attr, type):
            def counted(*args: Any, **kwargs: Any) -> Any:
                native.CALL_COUNTS[name] += 1
                _inside_extension[0] += 1
                try:
                    return attr(*args, **kwargs)
                finally:
                    _inside_extension[0] -= 1
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


# ---------------------------------------------------------------------------------------- tripwire
# Functions that hand out the objects on torch's mode stacks (the op recorder, its watch), take
# them off, or tell whether a mode or the profiler is active (the stacks' lengths, the dispatch
# TLS that a pushed mode sets, the profiler's state): with those a candidate runs PyTorch only when
# nothing records it (Tripwire.deny_mode_access).
_MODE_STACK_ACCESS = (
    ("torch._C", ("_get_dispatch_stack_at", "_pop_torch_dispatch_stack", "_get_function_stack_at",
                  "_pop_torch_function_stack", "_len_torch_dispatch_stack", "_len_torch_function_stack",
                  "_is_torch_function_mode_enabled", "_dispatch_tls_local_include_set",
                  "_dispatch_tls_local_exclude_set", "_dispatch_tls_is_dispatch_key_included",
                  "_dispatch_tls_is_dispatch_key_excluded", "_dispatch_tls_set_dispatch_key_included",
                  "_dispatch_tls_set_dispatch_key_excluded", "_dump_local_tls_set")),
    ("torch._C._autograd", ("_profiler_enabled", "_profiler_type")),
    ("torch.utils._python_dispatch", ("_get_current_dispatch_mode", "_get_current_dispatch_mode_stack", "_pop_mode",
                                      "_pop_mode_temporarily", "_disable_current_modes",
                                      "any_torch_dispatch_mode_on_stack")),
    ("torch.overrides", ("_get_current_function_mode", "_get_current_function_mode_stack", "_pop_mode",
                         "_pop_mode_temporarily")),
)
# Module-global flags that torch sets while a dispatch mode or a profiler is active (read by
# TorchDynamo and Inductor alone, both denied under the strict policy). Plain attributes cannot be
# gated: under the strict policy the op recorder sets them back to what they read before it was
# entered, so a recorded call reads them as an unrecorded one does.
_OBSERVER_FLAGS = (
    ("torch.autograd.profiler", "_is_profiler_enabled"),
    ("torch.utils._python_dispatch", "_is_in_torch_dispatch_mode"),
    ("torch.utils._python_dispatch", "_is_in_non_infra_torch_dispatch_mode"),
    ("torch.utils._python_dispatch", "_is_in_any_mode_without_ignore_compile_internals"),
)


def _observer_flags() -> list[tuple[Any, str, Any]]:
    """(module, name, value) of each _OBSERVER_FLAGS entry that exists in this torch."""
    found = []
    for module_name, name in _OBSERVER_FLAGS:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, name):
            found.append((module, name, getattr(module, name)))
    return found


def _mode_stack_gate(function: Callable[..., Any], label: str, known: set, events: list, local: Any,
                     getframe: Callable[..., Any]) -> Any:
    """A generator that alone holds `function` (a mode-stack accessor): its frame cannot be reached
    from candidate code (`gi_frame` and gc are denied by the tripwire), and the caller check runs in
    it, so neither `_gated`'s closure nor a direct `send` leads past the check. Each `send((args,
    kwargs))` answers (True, result) or (False, exception)."""
    outcome: Any = None
    while True:
        args, kwargs = yield outcome
        outcome = None
        was_busy = getattr(local, "busy", False)
        local.busy = True  # these frame requests are the tripwire's own
        try:
            caller = getframe(1)
            if caller.f_code is _GATED_CODE:  # called through the replacement, not by a direct send
                caller = getframe(2)
            code, line = caller.f_code, caller.f_lineno
            del caller
        finally:
            local.busy = was_busy
        if code not in known:
            events.append(f"{label} in {code.co_filename.rsplit('/', 1)[-1]}:{line} {code.co_name}")
            outcome = (False, PermissionError(f"cuda_gym: candidate code may not use {label} (the mode stacks "
                                              "hold the evaluator's op recorder)"))
            continue
        try:
            outcome = (True, function(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
            outcome = (False, exc)


def _gated(gate: Any) -> Callable[..., Any]:
    """The replacement of one mode-stack accessor: it calls through `gate`, one thread at a time (a
    generator cannot run in two threads at once)."""
    lock = threading.RLock()

    def gated(*args: Any, **kwargs: Any) -> Any:
        with lock:
            ok, value = gate.send((args, kwargs))
        if ok:
            return value
        raise value
    return gated


_GATED_CODE = _gated(None).__code__
_DENIED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys.settrace",
    "sys.setprofile", "sys.addaudithook",
})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_WATCHED_EVENTS = _DENIED_EVENTS | {"sys._getframe", "object.__getattr__", "object.__setattr__", "ctypes.dlsym"}


_prescanned: set[types.CodeType] = set()


def _walk_code(codes: list[types.CodeType], known: set[types.CodeType]) -> None:
    """Add `codes` and the code nested in them (functions defined inside) to `known`; what is
    known already is not walked again."""
    code_type = types.CodeType
    new = set(codes) - known
    while new:
        known |= new
        new = {c for code in new for c in code.co_consts if type(c) is code_type} - known


def prescan_code() -> None:
    """Walk the code of every function that exists now, then freeze the collector's objects
    (`gc.freeze`: later collections and `gc.get_objects` skip them), so that arming the tripwire
    walks only what is newer: 0.25 s less on a job's critical path, and collections during the
    timed calls traverse fewer objects. Call it before any candidate code exists in the process
    (a worker does, while it is a spare): whatever it finds is taken for the evaluator's code."""
    if Tripwire._armed is None:
        _walk_code([o.__code__ for o in gc.get_objects() if type(o) is types.FunctionType], _prescanned)
        gc.freeze()


class Tripwire:
    """A process-wide audit hook, armed right before candidate code is loaded (hooks cannot be
    removed). Code objects that exist at arming time are the evaluator's and its libraries';
    anything newer on the call stack is candidate code. While candidate code is on the stack it
    may not: list or walk objects through gc, obtain frames (sys._getframe, tracebacks',
    generators' and coroutines' frames) except through a few library functions that only read
    their caller's module name, install tracers/profilers or audit hooks, look up CPython symbols
    through ctypes, or swap a function's __code__. A denied attempt raises (ValueError for frame
    requests, as the stdlib expects; PermissionError otherwise) and is recorded, so a candidate
    that catches the error is still reported."""

    _armed: "Tripwire | None" = None

    @classmethod
    def arm(cls) -> "Tripwire":
        if cls._armed is None:
            cls._armed = cls()
        return cls._armed

    def __init__(self) -> None:
        import collections
        import enum
        import inspect
        import logging
        import traceback
        import typing

        known = set(_prescanned)  # walked already (`prescan_code`, while the worker was a spare)
        stack = [o.__code__ for o in gc.get_objects() if type(o) is types.FunctionType]
        for frame in sys._current_frames().values():  # module-level code of running frames too
            while frame is not None:
                stack.append(frame.f_code)
                frame = frame.f_back
        _walk_code(stack, known)

        def codes_of(*objects: Any) -> set[types.CodeType]:
            found = set()
            for obj in objects:
                for value in (vars(obj).values() if isinstance(obj, (types.ModuleType, type)) else [obj]):
                    value = getattr(value, "__func__", value)
                    code = getattr(value, "__code__", None)
                    if isinstance(code, types.CodeType):
                        found.add(code)
            return found

        # Pass-through frames between a frame request and whoever consumes the frame.
        transparent = codes_of(traceback, traceback.StackSummary, traceback.TracebackException, inspect)
        transparent.add(logging.currentframe.__code__)
        # Consumers that only read the caller's module name / file and line, or turn the stack into
        # text, and never hand a frame out (torch.manual_seed, for one, formats the stack).
        safe = codes_of(collections.namedtuple, typing._caller, logging.Logger.findCaller,
                        enum.EnumType._create_, torch.library.Library.__init__)
        safe |= codes_of(*[getattr(traceback, name) for name in (
            "format_stack", "extract_stack", "print_stack", "format_exc", "print_exc", "format_exception",
            "print_exception", "format_tb", "extract_tb", "print_tb", "print_last") if hasattr(traceback, name)])
        for module_name, names in (("typing_extensions", ("_caller", "_has_generic_or_protocol_as_origin")),
                                   ("torch._library.utils", ("get_source",))):
            module = sys.modules.get(module_name)
            safe |= codes_of(*[getattr(module, name) for name in names if hasattr(module, name)])
        safe |= codes_of(*[f for f in (getattr(torch.library.Library, "_register_fake", None),) if f])
        events: list[str] = []
        local = threading.local()
        getframe = sys._getframe

        def candidate_on_stack(frame: Any) -> bool:
            while frame is not None:
                if frame.f_code not in known:
                    return True
                frame = frame.f_back
            return False

        def hook(event: str, args: tuple) -> None:
            if event not in _WATCHED_EVENTS or getattr(local, "busy", False):
                return
            if event == "object.__getattr__" and not (len(args) > 1 and args[1] in _FRAME_ATTRIBUTES):
                return
            if event == "object.__setattr__" and not (len(args) > 1 and args[1] == "__code__"):
                return
            if event == "ctypes.dlsym" and not (len(args) > 1 and isinstance(args[1], str)
                                                and args[1].startswith(("Py", "_Py"))):
                return
            local.busy = True
            try:
                requester = getframe(1)
                if not candidate_on_stack(requester):
                    return
                frame_request = event in ("sys._getframe", "object.__getattr__")
                if frame_request:
                    consumer = requester
                    while consumer is not None:
                        if consumer.f_code in safe:
                            return
                        if consumer.f_code not in transparent:
                            break
                        consumer = consumer.f_back
                detail = args[1] if event in ("object.__getattr__", "object.__setattr__", "ctypes.dlsym") else ""
                code = requester.f_code
                where = f"{code.co_filename.rsplit('/', 1)[-1]}:{requester.f_lineno} {code.co_name}"
                events.append(f"{event}({detail}) in {where}" if detail else f"{event} in {where}")
            finally:
                local.busy = False
            if frame_request:
                raise ValueError("call stack is not deep enough")
            raise PermissionError(f"cuda_gym: candidate code may not use {event} here")

        # The mode-stack accessors' replacements, built now (installed by deny_mode_access): each
        # original is held only by a gate generator's frame, with the caller check inside it.
        gated_accessors: dict[int, Callable[..., Any]] = {}
        for module_name, names in _MODE_STACK_ACCESS:
            module = sys.modules.get(module_name)
            for name in names:
                original = getattr(module, name, None)
                if original is not None and id(original) not in gated_accessors:
                    gate = _mode_stack_gate(original, f"{module_name}.{name}", known, events, local, getframe)
                    next(gate)
                    gated_accessors[id(original)] = _gated(gate)

        sys.addaudithook(hook)
        self.events: Callable[[], list[str]] = lambda: list(events)
        self.record: Callable[[str], None] = events.append
        self._gated_accessors = gated_accessors
        self._mode_access_denied = False

    def deny_mode_access(self) -> None:
        """Strict policy: candidate code may not read or pop the torch dispatch-mode and
        torch-function-mode stacks (`torch._C._get_dispatch_stack_at`,
        `torch.utils._python_dispatch._get_current_dispatch_mode_stack`, `_disable_current_modes`,
        `torch.overrides._get_current_function_mode_stack`, ...), which hold the op recorder and its
        watch: with them it could rewrite or switch off what the recorder saw. Every reference in
        torch's and the evaluator's modules is replaced by a gate: torch's own code (known at arming)
        still gets through, a call from candidate code is recorded and raises PermissionError."""
        if self._mode_access_denied:
            return
        self._mode_access_denied = True
        gated = self._gated_accessors
        wanted = set(gated)
        for module_name, module in list(sys.modules.items()):
            if not (module_name == "torch" or module_name.startswith(("torch.", "cuda_gym."))):
                continue
            try:
                namespace = vars(module)
            except TypeError:
                continue
            if wanted.isdisjoint(map(id, namespace.values())):
                continue
            for name, value in list(namespace.items()):
                if id(value) in gated and getattr(value, "__code__", None) is not _GATED_CODE:
                    setattr(module, name, gated[id(value)])

    def deny_dynamo(self) -> None:
        """Strict policy: TorchDynamo (torch.compile) is not the candidate's kernel. Its C entry
        points are replaced everywhere torch keeps a reference; enabling it is denied and recorded.
        (`set_eval_frame(None)`, which torch's own `disable` wrappers call, stays a no-op.)"""
        try:
            import torch._C._dynamo.eval_frame as c_eval_frame
        except ImportError:
            return
        record = self.record

        def set_eval_frame(callback: Any) -> Any:
            if callback is None or callback is False:
                return None
            record("torch.compile (TorchDynamo set_eval_frame)")
            raise PermissionError("cuda_gym: torch.compile / TorchDynamo is not allowed under the strict policy")

        def denied(name: str) -> Callable[..., Any]:
            def stub(*args: Any, **kwargs: Any) -> Any:
                record(f"TorchDynamo {name}")
                raise PermissionError(f"cuda_gym: TorchDynamo's {name} is not allowed under the strict policy")
            return stub

        replacements: dict[int, Any] = {}
        for name, value in list(vars(c_eval_frame).items()):
            if name.startswith("__") or isinstance(value, type) or not callable(value):
                continue
            if name == "set_eval_frame":
                replacements[id(value)] = set_eval_frame
            elif name == "get_eval_frame_callback":
                replacements[id(value)] = lambda: None
            else:
                replacements[id(value)] = denied(name)
        originals = {id(v): v for v in vars(c_eval_frame).values()}
        for module in [c_eval_frame] + [m for n, m in list(sys.modules.items())
                                       if n.startswith("torch._dynamo") and isinstance(m, types.ModuleType)]:
            for name, value in list(vars(module).items()):
                if id(value) in replacements and originals.get(id(value)) is value:
                    setattr(module, name, replacements[id(value)])


# ------------------------------------------------------------------------------------ tamper check
WATCHED_MODULES = (
    "builtins", "time", "gc", "signal", "threading", "traceback", "json", "struct", "hmac", "hashlib",
    "secrets", "random", "statistics", "numpy", "multiprocessing.connection", "torch", "torch.cuda", "torch.nn", "torch.nn.functional",
    "torch.nn.modules.module", "torch.linalg", "torch.autograd", "torch.autograd.grad_mode",
    "torch.autograd.profiler", "torch.profiler", "torch.profiler.profiler", "torch.utils._python_dispatch",
    "torch.cuda.memory", "torch.cuda.streams",
    # Modules whose functions the worker's checks reach after the candidate loaded, through globals
    # resolved at call time: json's encoder, the pytree walk of the
    # op recorder, torch's dispatch-rule registry, the profiler's event tables, hook handles,
    # contextlib (the audit's context managers), device-index helpers, numpy's array_equal, os.
    "json.encoder", "torch.utils._pytree", "torch._library.simple_registry", "torch.autograd.profiler_util",
    "torch.utils.hooks", "torch.cuda._utils", "torch._utils", "torch._tensor", "torch.utils._contextlib",
    "contextlib", "weakref", "collections", "numpy._core.numeric", "os",
    "torch.library", "torch._C", "torch._ops", "torch.overrides", "torch.backends", "torch.backends.cuda",
    "torch.backends.cudnn", "torch.random", "torch.testing", "torch.utils.cpp_extension",
    "cuda_gym.native", "cuda_gym.eval.worker", "cuda_gym.eval.guard", "cuda_gym.eval.timing", "cuda_gym.eval.memory",
    "cuda_gym.eval.correctness", "cuda_gym.eval.protocol", "cuda_gym.eval.sandbox", "cuda_gym.eval.result",
    "cuda_gym.eval.config", "cuda_gym.eval.output_digest", "cuda_gym.eval.switches", "cuda_gym.eval.host_memory",
    "cuda_gym.eval.triton_support", "cuda_gym.eval.timed_inputs", "cuda_gym.eval.cupy_support",
)
# (module, class name) pairs whose class dict is snapshotted (every method, not a chosen few).
WATCHED_CLASSES = (
    ("random", "Random"), ("random", "SystemRandom"), ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"), ("torch.cuda", "Event"),
    ("torch.cuda", "Stream"), ("torch.profiler", "profile"), ("torch.utils._python_dispatch", "TorchDispatchMode"),
    ("multiprocessing.connection", "Connection"), ("json", "JSONEncoder"), ("json", "JSONDecoder"),
    ("cuda_gym.native", "NativeFunction"), ("cuda_gym.native", "KernelLibrary"),
    ("cuda_gym.eval.timed_inputs", "TimedLoader"), ("cuda_gym.eval.timed_inputs", "TimedInputs"),
    ("cuda_gym.eval.guard", "OpRecorder"), ("cuda_gym.eval.guard", "TamperCheck"), ("cuda_gym.eval.guard", "Tripwire"),
    ("cuda_gym.eval.guard", "_StorageMarks"), ("cuda_gym.eval.guard", "_HostReadWatch"),
    ("cuda_gym.eval.guard", "_CountingModule"), ("torch.overrides", "TorchFunctionMode"),
    ("cuda_gym.eval.switches", "Switches"), ("cuda_gym.eval.output_digest", "DigestMaker"),
    ("cuda_gym.eval.worker", "_Channel"), ("cuda_gym.eval.worker", "_TaskSetup"), ("cuda_gym.eval.timing", "Timer"),
    ("collections", "Counter"),  # the op recorder counts ops in one
    # Triton's launch paths, where triton_support counts launches (present once it is imported).
    ("triton.runtime.jit", "JITFunction"), ("triton.runtime.interpreter", "InterpretedFunction"),
    ("triton.runtime.interpreter", "GridExecutor"), ("triton.runtime.autotuner", "Autotuner"),
    # CuPy's launch classes as cupy_support replaced them (present once a CuPy candidate imported cupy).
    ("cupy", "RawKernel"), ("cupy", "RawModule"),
)
# (module, attribute) pairs whose object must stay the same one: instances and dicts the checks go
# through, which the module watch above does not compare (it compares callables, modules and classes).
WATCHED_OBJECTS = (
    ("json", "_default_encoder"), ("json", "_default_decoder"),
    ("torch._library.simple_registry", "singleton"),  # torch dispatch rules (a rule for OpRecorder skips it)
    ("torch.nn.modules.module", "_global_forward_pre_hooks"), ("torch.nn.modules.module", "_global_forward_hooks"),
    ("torch.utils._pytree", "SUPPORTED_NODES"),
    ("torch.autograd.profiler_util", "MEMORY_EVENT_NAME"),  # the all-threads check tells memory events by it
    # record_function hands its region names (the recorder's secret sentinels) to this module when set;
    # TamperCheck settles torch's lazy lookup of it before the snapshot.
    ("torch.autograd.profiler", "_cupti_monitor_module"),
)
# Types that must never become pytree nodes: the op recorder finds tensors as the leaves of an op's arguments.
PYTREE_LEAF_TYPES = (torch.Tensor, torch.nn.Parameter)
# ATen ops whose kernels the worker's own checks use (comparison, checksums, timing): a candidate
# that re-registers one of them (torch.library or TORCH_LIBRARY_IMPL) is caught here.
CHECKED_OPS = ("aten::sub.Tensor", "aten::abs", "aten::max", "aten::sum", "aten::linalg_vector_norm",
               "aten::isfinite", "aten::count_nonzero", "aten::ne.Tensor", "aten::_to_copy", "aten::copy_",
               "aten::zero_", "aten::equal", "aten::clone", "aten::index.Tensor", "aten::div.Tensor",
               "aten::clamp_min", "aten::argmax", "aten::gt.Scalar", "aten::mul.Tensor", "aten::add.Tensor",
               "aten::roll", "aten::randint", "aten::rand", "aten::dot", "aten::reshape", "aten::view",
               "aten::empty.memory_format", "aten::empty_like", "aten::detach", "aten::lift_fresh")


def _persisting_l2_limit_getter() -> Callable[[], Any] | None:
    """The current context's persisting-L2 set-aside (CU_LIMIT_PERSISTING_L2_CACHE_SIZE) through the
    driver API: L2 persistence (access-policy windows) only works while it is above 0."""
    import ctypes

    try:
        get_limit = ctypes.CDLL("libcuda.so.1").cuCtxGetLimit
    except (OSError, AttributeError):
        return None
    get_limit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    get_limit.restype = ctypes.c_int

    def persisting_l2_limit() -> Any:
        value = ctypes.c_size_t(0)
        status = get_limit(ctypes.byref(value), 0x06)
        return int(value.value) if status == 0 else f"<CUresult {status}>"

    return persisting_l2_limit


def _native_signal_reader(signals: list[int]) -> Callable[[], dict[int, tuple[int, int]]]:
    """A function that reads each signal's disposition as the kernel holds it (libc's sigaction:
    the handler's address, or SIG_DFL/SIG_IGN, and the flags). Native code that installs a handler
    with sigaction is invisible to Python's signal.getsignal, which reads only the handlers set
    through the signal module. Signals libc will not report (those it reserves) are left out."""
    import ctypes

    class SigAction(ctypes.Structure):  # struct sigaction of glibc on Linux (x86-64 and aarch64)
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong)))),
                    ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]

    sigaction = ctypes.CDLL(None).sigaction
    sigaction.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(SigAction)]
    sigaction.restype = ctypes.c_int
    action, pointer = SigAction(), ctypes.pointer

    def read() -> dict[int, tuple[int, int]]:
        found = {}
        for sig in signals:
            if sigaction(sig, None, pointer(action)) == 0:
                found[sig] = (action.handler or 0, action.flags)
        return found
    return read


def _trusted_handler_test() -> Callable[[int], bool]:
    """A test of a native signal handler's address: True when it is SIG_DFL or lies in Triton's own
    library. Triton's first compile in a process (an honest Triton candidate's first launch) runs
    LLVM, which installs its crash and interrupt handlers (LLVM's RegisterHandlers: SIGHUP, SIGINT,
    SIGTERM ... to one handler, SIGUSR1 to another, and the fault signals back to SIG_DFL with new
    flags), all inside libtriton.so. The library is the installed one, found by its real path when
    the check is armed (a library of the same name the candidate writes elsewhere is not it); a
    handler anywhere else, SIG_IGN included, stays a change."""
    import ctypes
    import importlib.util
    import os

    spec = importlib.util.find_spec("triton")
    trusted = set()
    if spec is not None and spec.origin:
        library = os.path.join(os.path.dirname(spec.origin), "_C", "libtriton.so")
        if os.path.exists(library):
            trusted.add(os.path.realpath(library))

    class DlInfo(ctypes.Structure):  # Dl_info of glibc
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                    ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

    dladdr = ctypes.CDLL(None).dladdr
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    dladdr.restype = ctypes.c_int
    realpath, decode, pointer = os.path.realpath, bytes.decode, ctypes.pointer

    def trusted_handler(address: int) -> bool:
        if address == 0:  # SIG_DFL: the kernel's default action, nothing of the candidate's runs
            return True
        info = DlInfo()
        if not trusted or dladdr(address, pointer(info)) == 0 or not info.fname:
            return False
        return realpath(decode(info.fname, errors="replace")) in trusted
    return trusted_handler


def _make_checker(device: str, tripwire: Tripwire, switches: Switches) -> Callable[[], list[str]]:
    """A closure that compares the process with the state captured now. Everything it calls is
    captured here, so rebinding module attributes, builtins or class methods later cannot change
    what it does; it is reachable only through the worker's own frame."""
    modules = {name: sys.modules[name] for name in WATCHED_MODULES if name in sys.modules}
    module_dicts = {name: dict(vars(module)) for name, module in modules.items()}
    # cuda_gym's own constants (UPPER_CASE names: type tuples, limits, sets of names), by identity and,
    # for sets and lists, by content: rebinding one is not a callable change, yet it can change
    # what a check accepts (worker._PLAIN_TENSORS decides which outputs are checksummed).
    content = _container_content
    constants = {name: {key: (value, content(value)) for key, value in vars(module).items() if _is_constant_name(key)}
                 for name, module in modules.items() if name.startswith("cuda_gym")}
    classes = {}
    for module_name, class_name in WATCHED_CLASSES:
        owner = sys.modules.get(module_name)
        cls = getattr(owner, class_name, None) if owner is not None else None
        if isinstance(cls, type):
            classes[f"{module_name}.{class_name}"] = cls
    class_dicts = {name: dict(vars(cls)) for name, cls in classes.items()}
    # Only what exists now (torch versions differ in what they have): a later change is the candidate's.
    objects = {f"{module_name}.{attribute}": (sys.modules[module_name], attribute,
                                              getattr(sys.modules[module_name], attribute))
               for module_name, attribute in WATCHED_OBJECTS
               if module_name in sys.modules and hasattr(sys.modules[module_name], attribute)}
    pytree = sys.modules.get("torch.utils._pytree")
    pytree_nodes, leaf_types = getattr(pytree, "SUPPORTED_NODES", {}), PYTREE_LEAF_TYPES
    # torch.library.register_torch_dispatch(op, cls, rule) makes the rule run instead of cls's
    # __torch_dispatch__ for that op: one for the op recorder's class would blind it. The registry's
    # entries are read with vars() (no properties); its table must stay the same dict.
    registry = getattr(sys.modules.get("torch._library.simple_registry"), "singleton", None)
    rule_table = vars(registry).get("_data") if registry is not None else None
    get_attribute = builtins.getattr
    dump_table = torch._C._dispatch_dump_table
    tables = {}
    for op in CHECKED_OPS:
        try:
            tables[op] = dump_table(op)
        except RuntimeError:
            pass
    sys_modules, module_type, type_type = sys.modules, types.ModuleType, type
    is_callable, items, is_instance, make_set = builtins.callable, dict.items, builtins.isinstance, builtins.set
    get_vars = builtins.vars
    get_trace, get_profile = sys.gettrace, sys.getprofile
    signals = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    get_signal = signal.getsignal
    handlers = {s: get_signal(s) for s in signals}
    read_dispositions = _native_signal_reader(signals)
    dispositions = read_dispositions()
    trusted_handler = _trusted_handler_test()
    len_dispatch, len_function = torch._C._len_torch_dispatch_stack, torch._C._len_torch_function_stack
    include_set, exclude_set = torch._C._dispatch_tls_local_include_set, torch._C._dispatch_tls_local_exclude_set
    getters = {
        "float32_matmul_precision": torch.get_float32_matmul_precision,
        "cuda.matmul.allow_tf32": lambda m=torch.backends.cuda.matmul: m.allow_tf32,
        "cudnn.allow_tf32": lambda c=torch.backends.cudnn: c.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda m=torch.backends.cuda.matmul: m.allow_fp16_reduced_precision_reduction,
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda m=torch.backends.cuda.matmul: m.allow_bf16_reduced_precision_reduction,
        "cudnn.deterministic": lambda c=torch.backends.cudnn: c.deterministic,
        "cudnn.benchmark": lambda c=torch.backends.cudnn: c.benchmark,
        "num_threads": torch.get_num_threads,
        "num_interop_threads": torch.get_num_interop_threads,
        "default_dtype": torch.get_default_dtype,
        "grad_enabled": torch.is_grad_enabled,
        "inference_mode": torch.is_inference_mode_enabled,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
        "dispatch_tls_include": lambda f=include_set: repr(f()),
        "dispatch_tls_exclude": lambda f=exclude_set: repr(f()),
        # The strict policy's switch that OpRecorder reads to hide torch's observer flags.
        "mode_access_denied": lambda t=tripwire, v=builtins.vars: v(t).get("_mode_access_denied"),
    }
    if device == "cuda":
        getters["cuda.current_device"] = torch.cuda.current_device
        getters["cuda.current_stream"] = lambda s=torch.cuda.current_stream: s().cuda_stream
        persisting_l2 = _persisting_l2_limit_getter()
        if persisting_l2 is not None:
            getters["cuda.persisting_l2_cache_limit"] = persisting_l2
    flags = {name: get() for name, get in getters.items()}
    switches_changed = switches.changed
    events = tripwire.events
    missing = object()

    def changes() -> list[str]:
        changed: list[str] = []
        for name, module in items(modules):
            if sys_modules.get(name) is not module:
                changed.append(f"sys.modules[{name!r}]")
            now, before = get_vars(module), module_dicts[name]
            for key, value in items(before):
                if key not in now:
                    changed.append(f"{name}.{key} (deleted)")
                elif now[key] is not value and (is_callable(value) or is_instance(value, (module_type, type_type))):
                    changed.append(f"{name}.{key}")
            for key, value in items(now):
                if key not in before and is_callable(value) and not is_instance(value, module_type):
                    changed.append(f"{name}.{key} (added)")
        for name, values in items(constants):
            now = get_vars(modules[name])
            for key, (value, inside) in items(values):
                if now.get(key, missing) is not value or content(value) != inside:
                    changed.append(f"{name}.{key}")
        for name, cls in items(classes):
            now, before = get_vars(cls), class_dicts[name]
            for key in make_set(now) | make_set(before):
                if now.get(key, missing) is not before.get(key, missing):
                    changed.append(f"{name}.{key}")
        for name, (owner, attribute, value) in items(objects):
            if get_attribute(owner, attribute, missing) is not value:
                changed.append(name)
        for leaf in leaf_types:
            if leaf in pytree_nodes:
                changed.append(f"torch.utils._pytree.SUPPORTED_NODES[{leaf.__name__}]")
        if rule_table is not None:
            try:
                if get_vars(registry).get("_data") is not rule_table:
                    changed.append("torch._library.simple_registry.singleton._data")
                for qualname, entry in items(dict(rule_table)):
                    holder = get_vars(entry).get("torch_dispatch_rules")
                    rules = get_vars(holder).get("_data", {}) if holder is not None else {}
                    for cls in list(rules):
                        if str(get_attribute(cls, "__module__", "")).startswith("cuda_gym"):
                            changed.append(f"a torch dispatch rule for {get_attribute(cls, '__name__', '?')} "
                                           f"on {qualname}")
            except Exception:  # noqa: BLE001 - an entry made unreadable is itself a change
                changed.append("torch._library.simple_registry (an entry that cannot be read)")
        for op, table in items(tables):
            if dump_table(op) != table:
                changed.append(f"kernel of {op}")
        if get_trace() is not None or get_profile() is not None:
            changed.append("a Python tracer or profiler (sys.settrace/setprofile)")
        for sig, handler in items(handlers):
            if get_signal(sig) is not handler:
                changed.append(f"signal handler {sig}")
        for sig, now_disposition in items(read_dispositions()):
            before_disposition = dispositions.get(sig, now_disposition)
            if now_disposition != before_disposition and not trusted_handler(now_disposition[0]):
                changed.append(f"native signal disposition {sig} (sigaction: handler, flags "
                               f"{before_disposition[0]:#x}, {before_disposition[1]:#x} -> "
                               f"{now_disposition[0]:#x}, {now_disposition[1]:#x})")
        if len_dispatch() or len_function():
            changed.append("a TorchDispatchMode/TorchFunctionMode left on the mode stack")
        for name, get in items(getters):
            try:
                now_value = get()
            except Exception as exc:  # noqa: BLE001
                now_value = f"<{type(exc).__name__}>"
            if now_value != flags[name]:
                changed.append(f"{name} ({flags[name]!r} -> {now_value!r})")
        changed += switches_changed()
        changed += [f"denied: {event}" for event in events()]
        return changed

    return changes


def _is_constant_name(name: str) -> bool:
    bare = name.lstrip("_")
    return bool(bare) and bare[0].isalpha() and bare == bare.upper()


def _container_content(value: Any) -> Any:
    """What an in-place change to a mutable set or list would change (None for anything else:
    dicts are left out, since counters such as `cuda_gym.native.CALL_COUNTS` change as they should)."""
    if isinstance(value, (set, frozenset)):
        return frozenset(map(id, value))
    if isinstance(value, list):
        return tuple(map(id, value))
    return None


class TamperCheck:
    """Arms the tripwire, snapshots the process and exposes `changes()` (an instance attribute, so
    patching the class later changes nothing). Create it right before loading the candidate."""

    def __init__(self, device: str, policy: str = "strict"):
        self.device = device
        count_native_calls()  # its own module rebinding happens before the snapshot
        settle_monitor = getattr(torch.autograd.profiler, "_maybe_cupti_monitor", None)
        if callable(settle_monitor):  # torch's lazy lookup, done now so that a later change is the candidate's
            settle_monitor()
        switches = Switches(device)  # read before the tripwire: it calls every getter torch has
        tripwire = Tripwire.arm()
        if policy == "strict":
            tripwire.deny_dynamo()
            tripwire.deny_mode_access()
        self.changes: Callable[[], list[str]] = _make_checker(device, tripwire, switches)
        # The global switches alone (switches.py): cheap enough to read after every paired call.
        self.switches_changed: Callable[[], list[str]] = switches.changed
