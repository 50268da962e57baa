"""The Tripwire: a process-wide audit hook, armed right before candidate code loads, that denies
candidate code the introspection that reaches the evaluator's own objects (gc, frames, tracers and
profilers, audit hooks, CPython symbols through ctypes, swapping a function's code) and, under the
strict policy, TorchDynamo and the mode-stack accessors that hand out or pop the op recorder. Code
that existed when it was armed is the evaluator's and its libraries'; anything newer on the call
stack is the candidate's. Every denied attempt is recorded for TamperCheck (tamper.py).

It runs in the candidate's process, so it raises the bar rather than drawing a hard boundary:
native code can still read and write the whole process (docs/attack-catalogue.md).
"""
from __future__ import annotations

import gc
import sys
import threading
import types
from typing import Any, Callable

import torch

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


def observer_flags() -> list[tuple[Any, str, Any]]:
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
    walks only what is newer (off the job's critical path), and collections during the timed
    calls traverse fewer objects. Call it before any candidate code exists in the process
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

