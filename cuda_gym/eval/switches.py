"""The process's global switches: every setting torch exposes that changes how later code computes.

A candidate runs in the same process as the paired reference, so a switch it flips (fused attention
off, cuDNN off, another BLAS library, TF32, deterministic algorithms, anomaly mode, allocator
settings, ...) would reach the reference's calls and slow them. The judge owns these switches: they
are read before the candidate loads (`snapshot`), and the verdict is FORBIDDEN as soon as one
differs after a candidate call (tamper.TamperCheck after each phase and trial, the worker after
every paired call).

The switches are found, not listed by hand, so that a flag a later torch adds is watched too:

- every zero-argument getter in `torch._C` named `_get_*`, `_is_*` or `_are_*` (the C side of every
  `torch.backends` flag, the SDP backend toggles and their priority order, the preferred BLAS and
  linalg libraries, TF32 and reduced-precision settings, determinism, anomaly mode, ...);
- every attribute of every object in the `torch.backends` tree (its modules, the flag holders they
  hold such as `cudnn.conv` or `cuda.matmul`, module globals such as `mha._is_fastpath_enabled`),
  and `fp32_precision`, which the holders answer through `__getattr__`;
- torch's and torch.cuda's zero-argument `get_*`, `is_*` and `are_*` functions, and on CUDA the
  allocator's settings and whether memory history is recorded;
- the process's scheduling state: its threads' CPU sets and its priority.

Kept: values that are plain (None, bool, int, float, str, an enum, a tuple or list of these), read
without a warning (a deprecated getter's replacement is read instead), the same twice, and the same
inside `torch.no_grad()` (the judge's own context for every call:
what differs there is the judge's state, not a switch). Left out by name: getters that report
counters or static facts rather than settings (`NOT_SWITCHES`).
"""
from __future__ import annotations

import enum
import importlib
import os
import pkgutil
import types
import warnings
from typing import Any, Callable

import torch

# Getters found by the rules above that report counters, caches or facts of the build, not settings.
NOT_SWITCHES = (
    "cache_stats", "caught_jit_exception", "thread_name", "upgraders", "operator_version", "version",
    "cpu_capability", "is_available", "is_built", "available", "device_count", "get_device_name",
    "is_initialized", "memory", "utilization", "temperature", "power_draw", "clock_rate", "get_rng_state",
    "get_arch_list", "get_gencode_flags", "is_current_stream_capturing", "is_in_bad_fork", "get_file_path",
    "get_device_module", "is_tf32_supported", "is_bf16_supported", "get_device_capability",
)
# Attribute names the flag holders answer through __getattr__, so that dir() does not list them.
DYNAMIC_NAMES = ("fp32_precision",)


def _plain(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (bool, int, float, str, enum.Enum)):
        return True
    if isinstance(value, (tuple, list)) and depth == 0 and len(value) <= 64:
        return all(_plain(item, 1) for item in value)
    return False


def _excluded(name: str) -> bool:
    return any(word in name for word in NOT_SWITCHES)


def _getter_functions(owner: Any, prefixes: tuple[str, ...], label: str) -> dict[str, Callable[[], Any]]:
    found = {}
    for name in dir(owner):
        if not name.startswith(prefixes) or _excluded(name):
            continue
        function = getattr(owner, name, None)
        if callable(function) and not isinstance(function, type):
            found[f"{label}.{name}"] = function
    return found


def _backends_tree() -> list[tuple[str, Any]]:
    """Every module of torch.backends (imported now) and the flag holders they hold, two levels down."""
    roots = [("torch.backends", torch.backends)]
    for info in pkgutil.iter_modules(torch.backends.__path__):
        try:
            roots.append((f"torch.backends.{info.name}", importlib.import_module(f"torch.backends.{info.name}")))
        except Exception:  # noqa: BLE001 - a backend this build cannot import has no switches here
            continue
    # The roots first, so that each module keeps its own name however else it can be reached.
    seen = {id(module) for _, module in roots}
    objects = list(roots)

    def descend(name: str, holder: Any, depth: int) -> None:
        for key in sorted(_keys(holder)):
            try:
                value = getattr(holder, key)
            except Exception:  # noqa: BLE001 - an attribute that cannot be read is no switch
                continue
            holds_flags = str(getattr(type(value), "__module__", "")).startswith("torch.backends") and not callable(
                value) and not isinstance(value, type)
            # A PropModule's wrapped module (`m`) keeps the globals its __getattr__ answers with.
            wrapped = isinstance(value, types.ModuleType) and str(getattr(value, "__name__", "")) == name
            if (holds_flags or wrapped) and id(value) not in seen:
                seen.add(id(value))
                objects.append((f"{name}.{key}", value))
                if depth < 1:
                    descend(f"{name}.{key}", value, depth + 1)

    for name, module in roots:
        descend(name, module, 0)
    return objects


def _keys(holder: Any) -> set[str]:
    """The attribute names of `holder`, its class's included (a PropModule's dir() lists neither)."""
    keys = set(dir(holder)) | set(vars(type(holder)))
    keys |= set(getattr(holder, "__dict__", {}))
    return {key for key in keys if not key.startswith("__")}


def _attribute_reader(holder: Any, key: str) -> Callable[[], Any]:
    return lambda: getattr(holder, key)


def _candidates(device: str) -> dict[str, Callable[[], Any]]:
    readers = _getter_functions(torch._C, ("_get_", "_is_", "_are_"), "torch._C")
    readers.update(_process_readers())
    readers.update(_getter_functions(torch, ("get_", "is_", "are_"), "torch"))
    if device == "cuda":
        readers.update(_getter_functions(torch.cuda, ("get_", "is_"), "torch.cuda"))
        # The CUDA allocator's settings and memory-history recording have no getter family above.
        for name in ("_cuda_isHistoryEnabled", "_accelerator_getAllocatorSettings", "_cuda_getAllocatorSettings"):
            if hasattr(torch._C, name):
                readers[f"torch._C.{name}"] = getattr(torch._C, name)
    for name, holder in _backends_tree():
        for key in _keys(holder) | set(DYNAMIC_NAMES):
            if _excluded(key):
                continue
            try:
                value = getattr(holder, key)
            except Exception:  # noqa: BLE001
                continue
            if isinstance(value, type):
                continue
            if not callable(value):
                readers[f"{name}.{key}"] = _attribute_reader(holder, key)
            elif key.endswith("_enabled") or key.startswith(("preferred_", "get_")):  # getters, never setters
                readers[f"{name}.{key}"] = value
    return readers


def _thread_affinities() -> tuple[str, ...]:
    """The distinct CPU sets this process's threads may run on (a thread torch starts later inherits
    one of them)."""
    masks = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status", encoding="ascii") as handle:
                masks.update(line.split(":", 1)[1].strip() for line in handle if line.startswith("Cpus_allowed_list"))
        except OSError:  # the thread ended
            continue
    return tuple(sorted(masks))


def _process_readers() -> dict[str, Callable[[], Any]]:
    """The process's own scheduling state outside torch (no getter family finds it): the threads'
    CPU sets and the process's priority. A candidate that pins the process to one core or lowers
    its priority between its calls would slow the paired reference's."""
    readers: dict[str, Callable[[], Any]] = {"process.priority": lambda: os.getpriority(os.PRIO_PROCESS, 0)}
    if os.path.isdir("/proc/self/task"):
        readers["process.thread_cpu_sets"] = _thread_affinities
    return readers


def _read(reader: Callable[[], Any]) -> Any:
    try:
        return reader()
    except Exception:  # noqa: BLE001
        return _UNREADABLE


_UNREADABLE = object()


def find_switches(device: str) -> dict[str, Callable[[], Any]]:
    """The readers of every switch of this process (the module docstring's rules), by name."""
    switches = {}
    for name, reader in _candidates(device).items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = _read(reader)
        if caught:  # a deprecated getter (its replacement is read too): it would warn on every check
            continue
        if first is _UNREADABLE or not _plain(first) or _read(reader) != first:
            continue
        with torch.no_grad():
            inside = _read(reader)
        if inside == first:
            switches[name] = reader
    return switches


class Switches:
    """The switches' values now (`snapshot`), and which differ later (`changed()`). The readers are
    bound at construction, so a candidate that rebinds torch's functions changes nothing here (the
    tamper check reports the rebinding itself)."""

    def __init__(self, device: str):
        self._readers = find_switches(device)
        self.snapshot = {name: _read(reader) for name, reader in self._readers.items()}

    def names(self) -> list[str]:
        return sorted(self._readers)

    def changed(self) -> list[str]:
        changes = []
        for name, reader in self._readers.items():
            now = _read(reader)
            if now != self.snapshot[name]:
                shown = "unreadable" if now is _UNREADABLE else repr(now)
                changes.append(f"{name} ({self.snapshot[name]!r} -> {shown})")
        return changes
