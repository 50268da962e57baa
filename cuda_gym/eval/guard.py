"""Policy enforcement inside the worker: what the candidate's forward dispatched, whether its own
native code ran, and whether it tampered with the process.

- `OpRecorder` records every ATen op the forward dispatches, from Python or from C++ (a dispatch
  mode sees both). Under the strict policy only creation, view and metadata ops are allowed; the
  compute must be the candidate's own (cuBLAS/cuDNN called directly from C++ never reach ATen).
  A dispatch mode is thread-local and can be taken off the stack by the code it watches, so the
  recorder also runs the ATen profiler on all threads (RecordFunction, in C++) and reports any
  compute op the profiler saw that the mode did not.
- `count_native_calls()` wraps `torch.utils.cpp_extension.load_inline/load` so calls into the
  modules they return are counted next to `cuda_gym.native.CALL_COUNTS`.
- `TamperCheck` arms the `Tripwire` (an audit hook that denies candidate code the introspection
  that reaches the evaluator's own objects: gc, frames, tracers, CPython symbols, code swapping,
  TorchDynamo under the strict policy) and snapshots what the evaluation relies on: the dicts of
  the modules and classes it calls (torch, time, builtins, numpy, the evaluator's own modules ...),
  ATen dispatch tables, torch mode stacks, precision and threading flags, signal handlers. Its
  `changes()` lists every difference and every denied attempt.

Everything here runs in the same process as the candidate, so it raises the bar rather than
drawing a hard boundary: native code can still read and write the whole process. See
docs/attack-catalogue.md for what is and is not caught.
"""
from __future__ import annotations

import builtins
import gc
import signal
import sys
import threading
import types
from collections import Counter
from typing import Any, Callable

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
# Composite ops that the dispatch mode never sees (they decompose above it) and that are no-ops
# when nothing is converted; the profiler reports them as leaves then.
_PROFILER_NOOP_WRAPPERS = frozenset({"to", "type_as", "contiguous", "reshape", "flatten", "view_as"})
# Pseudo-ops the recorder reports when the profiler cross-check itself was interfered with.
PROFILER_STOPPED = "aten::<profiler stopped or restarted during the forward>"
PROFILER_FAILED = "aten::<op profiler failed>"


def op_is_allowed(qualified_name: str, policy: str) -> bool:
    """`qualified_name` like 'aten::mm'. Ops of other namespaces are the candidate's own."""
    if policy == "permissive":
        return True
    namespace, _, name = qualified_name.partition("::")
    if namespace not in _PYTORCH_NAMESPACES:
        return True
    return name in CREATION_AND_VIEW_OPS


def _start_profiler() -> Any:
    """An ATen-op profiler over all threads, or None where another profiler is already active."""
    if torch.autograd._profiler_enabled():
        return None
    from torch._C._profiler import _ExperimentalConfig

    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                      experimental_config=_ExperimentalConfig(profile_all_threads=True))
    profiler.__enter__()
    return profiler


class OpRecorder(TorchDispatchMode):
    """Counts dispatched ops by qualified name ('aten::mm'); after the block, adds the ATen compute
    ops the profiler saw that the mode did not (hidden with `_disable_current_modes`, run on
    another thread, ...) and a pseudo-op if the profiler was stopped."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.hidden_ops: Counter[str] = Counter()
        self._profiler: Any = None
        self._sentinel = ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._schema.name] += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        try:
            self._profiler = _start_profiler()
            if self._profiler is not None:
                import secrets

                self._sentinel = f"cuda_gym_sentinel_{secrets.token_hex(8)}"
                with torch.autograd.profiler.record_function(self._sentinel):
                    pass
        except Exception:  # noqa: BLE001 - the dispatch mode still records
            self._profiler = None
            self.ops[PROFILER_FAILED] += 1
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            self._finish_profiler()

    def is_active(self) -> bool:
        return any(mode is self for mode in _get_current_dispatch_mode_stack())

    def _finish_profiler(self) -> None:
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
        seen = set(self.ops)
        parents_with_children = {id(e.cpu_parent) for e in events if e.cpu_parent is not None}
        for event in events:
            name = event.name
            namespace, _, short = name.partition("::")
            if namespace not in _PYTORCH_NAMESPACES or op_is_allowed(name, "strict") or name in seen:
                continue
            if short in _PROFILER_NOOP_WRAPPERS and id(event) not in parents_with_children:
                continue
            if id(event) in parents_with_children:
                continue  # a composite: its leaves are judged
            parent, explained = event.cpu_parent, False
            while parent is not None:
                if parent.name in seen:
                    explained = True
                    break
                parent = parent.cpu_parent
            if not explained:
                self.hidden_ops[name] += 1
        for name, count in self.hidden_ops.items():
            self.ops[name] += count


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

        sys.addaudithook(hook)
        self.events: Callable[[], list[str]] = lambda: list(events)
        self.record: Callable[[str], None] = events.append

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
    "secrets", "numpy", "multiprocessing.connection", "torch", "torch.cuda", "torch.nn", "torch.nn.functional",
    "torch.nn.modules.module", "torch.linalg", "torch.autograd", "torch.autograd.grad_mode",
    "torch.autograd.profiler", "torch.profiler", "torch.profiler.profiler", "torch.utils._python_dispatch",
    "torch.library", "torch._C", "torch._ops", "torch.overrides", "torch.backends", "torch.backends.cuda",
    "torch.backends.cudnn", "torch.random", "torch.testing", "torch.utils.cpp_extension",
    "cuda_gym.native", "cuda_gym.eval.worker", "cuda_gym.eval.guard", "cuda_gym.eval.timing",
    "cuda_gym.eval.correctness", "cuda_gym.eval.protocol", "cuda_gym.eval.sandbox", "cuda_gym.eval.result",
    "cuda_gym.eval.config",
)
# (module, class name) pairs whose class dict is snapshotted (every method, not a chosen few).
WATCHED_CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"), ("torch.cuda", "Event"),
    ("torch.cuda", "Stream"), ("torch.profiler", "profile"), ("torch.utils._python_dispatch", "TorchDispatchMode"),
    ("multiprocessing.connection", "Connection"), ("json", "JSONEncoder"), ("json", "JSONDecoder"),
    ("cuda_gym.native", "NativeFunction"), ("cuda_gym.native", "KernelLibrary"),
    ("cuda_gym.eval.guard", "OpRecorder"), ("cuda_gym.eval.guard", "TamperCheck"), ("cuda_gym.eval.guard", "Tripwire"),
    ("cuda_gym.eval.worker", "_Channel"), ("cuda_gym.eval.worker", "_TaskSetup"), ("cuda_gym.eval.timing", "Timer"),
)
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


def _make_checker(device: str, tripwire: Tripwire) -> Callable[[], list[str]]:
    """A closure that compares the process with the state captured now. Everything it calls is
    captured here, so rebinding module attributes, builtins or class methods later cannot change
    what it does; it is reachable only through the worker's own frame."""
    modules = {name: sys.modules[name] for name in WATCHED_MODULES if name in sys.modules}
    module_dicts = {name: dict(vars(module)) for name, module in modules.items()}
    classes = {}
    for module_name, class_name in WATCHED_CLASSES:
        owner = sys.modules.get(module_name)
        cls = getattr(owner, class_name, None) if owner is not None else None
        if isinstance(cls, type):
            classes[f"{module_name}.{class_name}"] = cls
    class_dicts = {name: dict(vars(cls)) for name, cls in classes.items()}
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
    }
    if device == "cuda":
        getters["cuda.current_device"] = torch.cuda.current_device
        getters["cuda.current_stream"] = lambda s=torch.cuda.current_stream: s().cuda_stream
        persisting_l2 = _persisting_l2_limit_getter()
        if persisting_l2 is not None:
            getters["cuda.persisting_l2_cache_limit"] = persisting_l2
    flags = {name: get() for name, get in getters.items()}
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
        for name, cls in items(classes):
            now, before = get_vars(cls), class_dicts[name]
            for key in make_set(now) | make_set(before):
                if now.get(key, missing) is not before.get(key, missing):
                    changed.append(f"{name}.{key}")
        for op, table in items(tables):
            if dump_table(op) != table:
                changed.append(f"kernel of {op}")
        if get_trace() is not None or get_profile() is not None:
            changed.append("a Python tracer or profiler (sys.settrace/setprofile)")
        for sig, handler in items(handlers):
            if get_signal(sig) is not handler:
                changed.append(f"signal handler {sig}")
        if len_dispatch() or len_function():
            changed.append("a TorchDispatchMode/TorchFunctionMode left on the mode stack")
        for name, get in items(getters):
            try:
                now_value = get()
            except Exception as exc:  # noqa: BLE001
                now_value = f"<{type(exc).__name__}>"
            if now_value != flags[name]:
                changed.append(f"{name} ({flags[name]!r} -> {now_value!r})")
        changed += [f"denied: {event}" for event in events()]
        return changed

    return changes


class TamperCheck:
    """Arms the tripwire, snapshots the process and exposes `changes()` (an instance attribute, so
    patching the class later changes nothing). Create it right before loading the candidate."""

    def __init__(self, device: str, policy: str = "strict"):
        self.device = device
        count_native_calls()  # its own module rebinding happens before the snapshot
        tripwire = Tripwire.arm()
        if policy == "strict":
            tripwire.deny_dynamo()
        self.changes: Callable[[], list[str]] = _make_checker(device, tripwire)
