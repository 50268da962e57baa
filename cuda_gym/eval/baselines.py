"""Baseline times (eager and torch.compile), cached on disk per task, sizes, device, torch
version, precision policy and timing settings."""
from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .config import PAIRING_ISSUE_RATIO, TIMER_REVISION, EvalConfig

# A baseline that no worker measured because its workers timed out or died (perhaps transiently:
# under load, beside another job) is measured again once this long has passed; a cached failure
# caps every later candidate's reward on the task. The wait doubles with each failure in a row, and
# after BASELINE_RETRIES retries the failure is final, so a reference that hangs costs a few
# timeouts over a long run, not one per candidate. A failure a worker reported (torch.compile
# raised, the reference raised) is final at once.
BASELINE_RETRY_S = 600.0
BASELINE_RETRIES = 3
BASELINE_NAMES = ("eager", "compile")


def baseline_key(task_id: str, source_hash: str, sizes: dict, device: str, torch_version: str,
                 config: EvalConfig, timer: str) -> str:
    """`timer`: "held" or "open" (timing.py), as the evaluator's workers time."""
    timing = (config.precision, config.warmup_reps, config.timing_reps, config.timing_min_reps,
              config.timing_budget_s, config.l2_flush, config.timing_input_sets, config.cpu_threads,
              config.baseline_workers, TIMER_REVISION, timer, config.timing_warmup_s,
              config.baseline_agreement if config.baseline_workers == 3 else None,  # the stop needs three
              config.device_bound_issue_ratio if config.baseline_workers > 1 else None,
              # which baselines' torch.compile pairing is skipped as device time (baseline_job._pair_baselines)
              PAIRING_ISSUE_RATIO if config.host_pairing else None,
              # paired entries stop on their eager/compile ratios' agreement instead of compile's
              # medians, and keep the higher of two ratios (baseline_runs.BaselineRuns.entry)
              "ratio agreement" if config.host_pairing else None,
              # the float64 measurement of the reference is made after the baseline timings
              "reference error after timing")
    digest = hashlib.sha256(json.dumps([source_hash, sizes, timing], sort_keys=True).encode()).hexdigest()[:16]
    return f"{task_id}|{device}|torch {torch_version}|{config.precision}|{digest}"


def entry_serves(entry: dict[str, Any] | None, needed: tuple[str, ...], now: float | None = None) -> bool:
    """Whether a cached entry answers for the baselines `needed` as it is: all of them there, and
    none of them a failure due to be measured again (`failed_at`: the times of its failures in a row)."""
    if entry is None or not all(name in entry for name in needed):
        return False
    failures = entry.get("failed_at")
    if not isinstance(failures, list) or not failures or len(failures) > BASELINE_RETRIES:
        return True  # measured, failed for good, or cached before failures were retried
    if all(entry[name] is not None for name in needed if name in BASELINE_NAMES):
        return True
    now = time.time() if now is None else now
    return now - max(failures) < BASELINE_RETRY_S * 2 ** (len(failures) - 1)


def merge_entries(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A re-measured entry over an old one. 'profiles' and 'errors' are kept per baseline name for
    the names `new` did not measure (an entry measured for compile only keeps eager's profile)
    and replaced for those it did (a new measurement clears an old error); 'reference_errors' (the
    float64 measurements, per seed and number of draws) are kept beside the new ones; 'failed_at'
    (the times of failures in a row that may be transient) grows with each, and goes once every
    baseline is measured or a failure is final."""
    # A failed measurement never replaces a time measured before (nor its worker medians, profile).
    kept = {name for name in BASELINE_NAMES if new.get(name, 0) is None and old.get(name) is not None}

    def of_kept(key: str) -> bool:
        return any(key == name or key.startswith(f"{name}_") for name in kept)

    merged = {**old, **{key: value for key, value in new.items() if not of_kept(key)}}
    measured = {name for name in BASELINE_NAMES if name in new and name not in kept}
    for nested in ("profiles", "errors"):
        if isinstance(old.get(nested), dict) and isinstance(new.get(nested), dict):
            merged[nested] = {**{k: v for k, v in old[nested].items() if k not in measured},
                              **{k: v for k, v in new[nested].items() if k not in kept}}
    if isinstance(old.get("reference_errors"), dict) and isinstance(new.get("reference_errors"), dict):
        merged["reference_errors"] = {**old["reference_errors"], **new["reference_errors"]}  # one per seed and draws
    if all(merged.get(name) is not None for name in BASELINE_NAMES if name in merged):
        merged.pop("failed_at", None)  # nothing failed any more
    elif isinstance(new.get("failed_at"), list):  # one more failure in a row (the same one twice: once)
        merged["failed_at"] = sorted({*(old.get("failed_at") or []), *new["failed_at"]})
    elif any(new.get(name, 0) is None for name in measured):
        merged.pop("failed_at", None)  # a failure its worker reported: final
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
        return entry_serves(entry, needed)

    def get(self, key: str, compute: Callable[[], dict[str, Any]], needed: tuple[str, ...]) -> dict[str, Any]:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        with lock:
            with self._lock:
                entry = self._entries.get(key)
            if entry_serves(entry, needed):
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
