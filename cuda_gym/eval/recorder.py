"""The op recorder: what a candidate's forward dispatched and which of it computed on the task's data.

`OpRecorder` records every ATen op the forward dispatches, from Python or from C++ (a dispatch mode
sees both), and where each tensor's data comes from. Under the strict policy (op_policy.py) creation,
view and metadata ops are allowed, and so is PyTorch compute on constants (tensors the forward made
from literals or shapes, moved or cast); compute on the task's data (inputs, parameters, buffers
and what comes from them) must be the candidate's own (cuBLAS/cuDNN called directly from C++ never
reach ATen). A dispatch mode is thread-local and can be taken off the stack by the code it watches,
so the recorder also runs the ATen profiler on all threads (RecordFunction, in C++) and reports any
compute op the profiler saw outside the mode's handling.

It runs in the candidate's process, so it raises the bar rather than drawing a hard boundary:
native code can still read and write the whole process (docs/attack-catalogue.md).
"""
from __future__ import annotations

import inspect
import weakref
from collections import Counter
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .. import native
from . import native_calls
from .op_policy import CREATION_AND_VIEW_OPS, PYTORCH_NAMESPACES, op_is_allowed
from .tripwire import Tripwire, observer_flags

# Composite ops that the dispatch mode never sees (they decompose above it) and that are no-ops
# when nothing is converted; the profiler reports them as leaves then.
_PROFILER_NOOP_WRAPPERS = frozenset({"to", "type_as", "contiguous", "reshape", "flatten", "view_as",
                                     "resolve_conj", "resolve_neg"})
# The profiler event under each op the dispatch mode handled (its `__torch_dispatch__`).
_MODE_EVENT = "PythonDispatchMode"
# Pseudo-ops the recorder reports when the profiler cross-check itself was interfered with.
PROFILER_STOPPED = "aten::<profiler stopped or restarted during the forward>"
PROFILER_FAILED = "aten::<op profiler failed>"

# Data flow: the strict policy's notion of "compute on the task's data".
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
        if self._after_native and not native_calls.inside_extension[0]:
            # Back in Python: values native code left in host memory look like Python numbers.
            self._close("a call into native code returned")
        elif self._watch.depth:
            return  # the op comes from a torch function the watch is handling
        elif not watch_live:
            self._close("torch-function handling was turned off (the host-read watch was blind)")
        elif not native_calls.inside_extension[0]:
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
        pytorch = namespace in PYTORCH_NAMESPACES
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
        if namespace not in PYTORCH_NAMESPACES:
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
        unobserved = observer_flags() if Tripwire._armed is not None and Tripwire._armed._mode_access_denied else []
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
            return (namespace in PYTORCH_NAMESPACES and not op_is_allowed(event.name, "strict")
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
                                              in PYTORCH_NAMESPACES):
                child, parent = parent, parent.cpu_parent
            if parent is None:  # not inside the mode's handling of a PyTorch op
                self.hidden_ops[event.name] += 1
        for name, count in self.hidden_ops.items():
            self.ops[name] += count
