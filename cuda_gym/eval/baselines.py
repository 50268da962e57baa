"""Baseline times (eager and torch.compile), cached on disk per task, sizes, device, torch
version, precision policy and timing settings."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable

from .config import PAIRING_ISSUE_RATIO, TIMER_REVISION, EvalConfig


def baseline_key(task_id: str, source_hash: str, sizes: dict, device: str, torch_version: str,
                 config: EvalConfig, timer: str) -> str:
    """`timer`: "held" or "open" (timing.py), as the evaluator's workers time."""
    timing = (config.precision, config.warmup_reps, config.timing_reps, config.timing_min_reps,
              config.timing_budget_s, config.l2_flush, config.timing_input_sets, config.cpu_threads,
              config.baseline_workers, TIMER_REVISION, timer, config.timing_warmup_s,
              config.baseline_agreement if config.baseline_workers == 3 else None,  # the stop needs three
              config.device_bound_issue_ratio if config.baseline_workers > 1 else None,
              # which baselines' torch.compile pairing is skipped as device time (worker._pair_baselines)
              PAIRING_ISSUE_RATIO if config.host_pairing else None,
              # paired entries stop on their eager/compile ratios' agreement instead of compile's
              # medians, and keep the higher of two ratios (2026-12-05; Evaluator._baseline_entry)
              "ratio agreement" if config.host_pairing else None,
              # the float64 measurement of the reference after the baseline timings, not before (2026-12-05)
              "reference error after timing")
    digest = hashlib.sha256(json.dumps([source_hash, sizes, timing], sort_keys=True).encode()).hexdigest()[:16]
    return f"{task_id}|{device}|torch {torch_version}|{config.precision}|{digest}"


def merge_entries(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A re-measured entry over an old one. 'profiles' and 'errors' are kept per baseline name for
    the names `new` did not measure (an entry measured for compile only keeps eager's profile)
    and replaced for those it did (a new measurement clears an old error); 'reference_errors' (the
    float64 measurements, per seed and number of draws) are kept beside the new ones."""
    merged = {**old, **new}
    measured = {name for name in ("eager", "compile") if name in new}
    for nested in ("profiles", "errors"):
        if isinstance(old.get(nested), dict) and isinstance(new.get(nested), dict):
            merged[nested] = {**{k: v for k, v in old[nested].items() if k not in measured}, **new[nested]}
    if isinstance(old.get("reference_errors"), dict) and isinstance(new.get("reference_errors"), dict):
        merged["reference_errors"] = {**old["reference_errors"], **new["reference_errors"]}  # one per seed and draws
    return merged


class BaselineCache:
    """A JSON file of baseline results; `get` computes a missing entry once, even under threads."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            try:
                self._entries = json.loads(path.read_text())
            except (OSError, ValueError):
                self._entries = {}  # a damaged cache is only a cache: measure again

    def cached(self, key: str, needed: tuple[str, ...]) -> bool:
        """Whether `get(key, ..., needed)` would be answered from the file without measuring."""
        with self._lock:
            entry = self._entries.get(key)
        return entry is not None and all(name in entry for name in needed)

    def get(self, key: str, compute: Callable[[], dict[str, Any]], needed: tuple[str, ...]) -> dict[str, Any]:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                entry = self._entries.get(key)
            if entry is not None and all(name in entry for name in needed):
                return entry
            entry = compute()
            with self._lock:
                merged = merge_entries(self._entries.get(key, {}), entry)
                self._entries[key] = merged
                self._save()
            return merged

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._entries, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
