"""TamperCheck: what the evaluation relies on, snapshotted right before the candidate loads, and
every difference afterwards.

`TamperCheck` arms the Tripwire (tripwire.py) and snapshots the dicts of the modules and classes the
evaluation calls (torch, time, builtins, numpy, the evaluator's own modules and their UPPER_CASE
constants ...), ATen dispatch tables, torch's dispatch-rule registry and mode stacks, precision and
threading flags, signal handlers (Python's and each signal's native disposition, read with libc's
sigaction) and the global switches (switches.py). Its `changes()` lists every difference and every
attempt the tripwire denied.

It runs in the candidate's process, so it raises the bar rather than drawing a hard boundary:
native code can still read and write the whole process (docs/attack-catalogue.md).
"""
from __future__ import annotations

import builtins
import signal
import sys
import types
from typing import Any, Callable

import torch

from .native_calls import count_native_calls
from .switches import Switches
from .tripwire import Tripwire

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
    "cuda_gym.native",
    "numpy.random",  # the draws of a task whose get_inputs() uses NumPy's stream, made after candidate code loaded
    # The worker's own modules (worker.py and the jobs it runs) and the guards (this module's kin).
    "cuda_gym.eval.worker", "cuda_gym.eval.channel", "cuda_gym.eval.worker_device", "cuda_gym.eval.output_report",
    "cuda_gym.eval.failures", "cuda_gym.eval.task_setup", "cuda_gym.eval.phase_clock", "cuda_gym.eval.timed_calls",
    "cuda_gym.eval.candidate_load", "cuda_gym.eval.profiling", "cuda_gym.eval.paired_reference",
    "cuda_gym.eval.eval_job", "cuda_gym.eval.baseline_job",
    "cuda_gym.eval.op_policy", "cuda_gym.eval.recorder", "cuda_gym.eval.native_calls", "cuda_gym.eval.tripwire",
    "cuda_gym.eval.tamper", "cuda_gym.eval.timing", "cuda_gym.eval.memory",
    "cuda_gym.eval.correctness", "cuda_gym.eval.draws", "cuda_gym.eval.protocol", "cuda_gym.eval.sandbox", "cuda_gym.eval.result",
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
    ("cuda_gym.eval.timed_inputs", "CheckedDigest"), ("cuda_gym.eval.timing", "ProbedChecksum"),
    ("cuda_gym.eval.recorder", "OpRecorder"), ("cuda_gym.eval.tamper", "TamperCheck"),
    ("cuda_gym.eval.tripwire", "Tripwire"), ("cuda_gym.eval.recorder", "_StorageMarks"),
    ("cuda_gym.eval.recorder", "_HostReadWatch"), ("cuda_gym.eval.native_calls", "_CountingModule"),
    ("torch.overrides", "TorchFunctionMode"),
    ("cuda_gym.eval.switches", "Switches"), ("cuda_gym.eval.output_digest", "DigestMaker"),
    ("cuda_gym.eval.channel", "Channel"), ("cuda_gym.eval.task_setup", "TaskSetup"), ("cuda_gym.eval.timing", "Timer"),
    ("cuda_gym.eval.draws", "_SourceTransform"),  # the correctness draws are made after candidate code loaded
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


# SA_ONSTACK | SA_RESTART (Linux): the flags in which a handler that glibc's `signal()` re-installs
# differs from one Python's signal module installed (sigaction with SA_ONSTACK).
REINSTALL_FLAGS = 0x08000000 | 0x10000000


def _reinstalled(before: tuple[int, int], now: tuple[int, int]) -> bool:
    """Whether a disposition is the same handler as before with only SA_ONSTACK / SA_RESTART
    changed. NVRTC (an honest CuPy candidate's first launch compiles with it) saves the handlers
    of SIGINT, SIGTERM, SIGXFSZ ... around a compile and puts them back with `signal()`, which
    sets BSD flags: the handler is the one that was there, so nothing new runs on a signal."""
    return now[0] == before[0] and not (now[1] ^ before[1]) & ~REINSTALL_FLAGS


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


def _make_checker(device: str, tripwire: Tripwire, switches: Switches,
                  task_namespace: dict | None = None) -> Callable[[], list[str]]:
    """A closure that compares the process with the state captured now. Everything it calls is
    captured here, so rebinding module attributes, builtins or class methods later cannot change
    what it does; it is reachable only through the worker's own frame. `task_namespace`: the
    task's module namespace (not in sys.modules), watched name by name, with the dicts of the
    classes it defines (the reference Model): the timed draws, the reference's forward and the
    paired reference look their names up there."""
    task_values = dict(task_namespace or {})
    task_classes = {f"<task>.{key}": value for key, value in task_values.items()
                    if isinstance(value, type) and value.__module__ == task_values.get("__name__")}
    task_class_dicts = {name: dict(vars(cls)) for name, cls in task_classes.items()}
    modules = {name: sys.modules[name] for name in WATCHED_MODULES if name in sys.modules}
    module_dicts = {name: dict(vars(module)) for name, module in modules.items()}
    # cuda_gym's own constants (UPPER_CASE names: type tuples, limits, sets of names), by identity and,
    # for sets and lists, by content: rebinding one is not a callable change, yet it can change
    # what a check accepts (output_report._PLAIN_TENSORS decides which outputs are checksummed).
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
    trusted_handler, reinstalled = _trusted_handler_test(), _reinstalled
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

    def rebound(now: Any, before: dict) -> list[str]:
        """The keys added, deleted or bound to another object since `before` was taken."""
        return [key for key in make_set(now) | make_set(before)
                if now.get(key, missing) is not before.get(key, missing)]

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
            changed += [f"{name}.{key}" for key in rebound(get_vars(cls), class_dicts[name])]
        if task_namespace is not None:
            changed += [f"the task's namespace: {key}" for key in rebound(task_namespace, task_values)]
            for name, cls in items(task_classes):
                changed += [f"{name}.{key}" for key in rebound(get_vars(cls), task_class_dicts[name])]
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
            if (now_disposition != before_disposition and not trusted_handler(now_disposition[0])
                    and not reinstalled(before_disposition, now_disposition)):
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

    def __init__(self, device: str, policy: str = "strict", task_namespace: dict | None = None):
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
        self.changes: Callable[[], list[str]] = _make_checker(device, tripwire, switches, task_namespace)
        # The global switches alone (switches.py): cheap enough to read after every paired call.
        self.switches_changed: Callable[[], list[str]] = switches.changed
