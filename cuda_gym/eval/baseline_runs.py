"""`BaselineRuns`: a task's eager and torch.compile baseline times, measured in fresh workers.

Each baseline is timed in up to `EvalConfig.baseline_workers` fresh baseline workers, one at a time
on the device slot, and the median worker's time is kept (see `BaselineRuns.entry`). The entry is
kept in the baseline cache (baselines.py) under a key naming the task, sizes, device, torch version
and timing settings; `prewarm` compiles tasks' torch.compile baselines side by side before any is
timed.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..tasks.task import Task
from .baselines import baseline_key
from .config import EvalConfig
from .judgement import complete_reference_error
from .pool import Worker, WorkerDied, WorkerPool, WorkerTimeout, run_job
from .worker_setup import SPARE_WORKERS, WorkerSetup

PREWARM_TIMEOUT_S = 240.0  # a level-3 model's first torch.compile took at most 40 s on an H200


def _device_bound(samples: dict[str, list[dict[str, Any]]], config: EvalConfig) -> bool:
    """One worker timed every baseline and each of its times is device-bound
    (`EvalConfig.device_bound_issue_ratio`): another fresh worker would measure the same."""
    return all(len(stats) == 1 and config.device_bound(stats[0].get("method"), stats[0].get("detail"))
               for stats in samples.values())


def _workers_agree(samples: dict[str, list[dict[str, Any]]], ratios: list[float], config: EvalConfig) -> bool:
    """Two workers measured what a speedup uses, within `baseline_agreement` of each other: eager's
    medians, and compile's, or, where both workers paired compile with eager (`ratios`, each
    worker's eager-over-compile ratio), those two ratios instead: the speedup vs compile is then
    bridged through the ratio (Evaluator._set_speedups), so compile's own median sets no speedup."""
    bridged = len(ratios) == 2 and "compile" in samples
    groups = [[stats["median_ms"] for stats in times] for name, times in samples.items()
              if not (name == "compile" and bridged)]
    if bridged:
        groups.append(ratios)
    for values in groups:
        if len(values) != 2:
            return False
        low, high = sorted(values)
        if not (low > 0 and high / low - 1 <= config.baseline_agreement):  # NaN never agrees
            return False
    return True


class BaselineRuns:
    """Measures and caches baselines for one evaluator.

    cache: where entries are read and stored, an object with `BaselineCache`'s
        `get(key, compute, needed)` (and optionally `cached(key, needed)`).
    device_slot: held while a baseline worker runs, as while a candidate is judged.
    device_name: the CUDA device the key names (cuda backend).
    """

    def __init__(self, setup: WorkerSetup, pool: WorkerPool, device_slot: threading.Semaphore, cache: Any,
                 device_name: str, torch_version: str):
        self.setup = setup
        self.cache = cache
        self.device_name = device_name
        self.torch_version = torch_version
        self._pool = pool
        self._device_slot = device_slot

    def prewarm(self, tasks: list[Task], backend: str, config: EvalConfig, parallel: int | None) -> dict[str, str]:
        """Evaluator.prewarm's work (what it does and returns is said there), with the backend and
        config resolved."""
        parallel = parallel if parallel is not None else min(8, (os.cpu_count() or 2) // 2)
        cached = getattr(self.cache, "cached", lambda key, needed: False)
        needed = self.needed(backend, config)
        todo = [t for t in tasks if not cached(self.key(t, backend, config), needed)]
        if "compile" not in config.baselines or parallel <= 1 or not todo:
            return {}
        spec = self.setup.spec("baseline", backend, config, self.setup.base_env(backend))
        compile_threads = max(1, (os.cpu_count() or 2) // parallel)  # inductor's own pool, per prewarm

        def prewarm_one(task: Task) -> str:
            worker = None
            outcome: dict[str, Any] = {}
            try:
                worker = Worker(spec)
                run_job(worker, self.setup.job(task, backend, config, prewarm=True, compile_threads=compile_threads),
                        min(config.baseline_timeout_s, PREWARM_TIMEOUT_S),
                        lambda m: outcome.setdefault(m.kind, m.meta) is not None)
            except Exception as exc:  # noqa: BLE001 - a failed prewarm only costs its time
                return f"{type(exc).__name__}: {exc}"[:300]
            finally:
                if worker is not None:
                    worker.kill()
            return "" if "prewarm" in outcome else str((outcome.get("error") or {}).get("message", "no result"))[:300]

        with self._device_slot:
            self._pool.settle()
            with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="cuda-gym-prewarm") as pool:
                outcomes = dict(zip([t.id for t in todo], pool.map(prewarm_one, todo)))
        return outcomes  # the next device job's settle() waits until these workers are reaped

    def key(self, task: Task, backend: str, config: EvalConfig) -> str:
        device = self.device_name if backend == "cuda" else f"cpu x{config.cpu_threads or os.cpu_count()}"
        timer = "held" if backend == "cuda" and self.setup.held_timing else "open"
        return baseline_key(task.id, task.source_hash, task.sizes_for(backend), device, self.torch_version, config, timer)

    @staticmethod
    def pairs_baselines(backend: str, config: EvalConfig) -> bool:
        """Whether baseline workers pair torch.compile with eager (EvalConfig.host_pairing)."""
        return backend in config.host_pairing and {"eager", "compile"} <= set(config.baselines)

    def needed(self, backend: str, config: EvalConfig) -> tuple[str, ...]:
        """What a cached baseline entry must hold to be used as it is."""
        needed = (*config.baselines, "profiles") if backend == "cuda" and config.baselines else tuple(config.baselines)
        return (*needed, "compile_pairing") if self.pairs_baselines(backend, config) else needed

    def entry(self, task: Task, backend: str, config: EvalConfig) -> dict[str, Any]:
        """The task's baseline entry: from the cache where it serves, else measured (and cached).
        Its float64 reference measurement is kept in `setup.reference_errors` for later jobs."""
        key = self.key(task, backend, config)
        error_key = self.setup.reference_error_key(task, backend, config)
        pair_baselines = self.pairs_baselines(backend, config)

        def measure_once() -> tuple[dict[str, Any], str, str]:
            """One baseline job in a fresh worker: (its 'baseline' message with the worker's
            'profiles' and 'profile_errors' added, or {} and an error, and how it failed: "timeout",
            "died" (both perhaps transient), "error" (the worker reported one) or ""). Times sent
            before the worker failed in its profiled forwards are kept."""
            outcome: dict[str, Any] = {}
            failure, kind = "", ""
            with self._device_slot:
                started = time.perf_counter()
                self._pool.settle()  # no spare warms up while the baselines are timed
                settled = time.perf_counter()
                spec = self.setup.spec("baseline", backend, config, self.setup.base_env(backend))
                worker = self._pool.acquire(spec, spares=SPARE_WORKERS[backend]["baseline"])
                try:
                    run_job(worker, self.setup.job(task, backend, config, env=self.setup.base_env(backend),
                                                   pair_baselines=pair_baselines),
                            config.baseline_timeout_s, lambda m: outcome.setdefault(m.kind, m.meta) is not None)
                except WorkerTimeout:
                    failure, kind = f"timed out after {config.baseline_timeout_s:g} s", "timeout"
                except WorkerDied as exc:
                    failure, kind = f"{exc}\n{worker.log_tail(2000)}", "died"
                finally:
                    worker.kill()
                    self._pool.replenish()
                    # Where a baseline worker's wall time goes: waiting for spares, the whole job
                    # (process start included) and the worker's own phases.
                    phases = (outcome.get("baseline_profiles") or outcome.get("baseline") or {}).get("phase_s") or {}
                    outcome["wall_s"] = {"settle": round(settled - started, 4),
                                         "job": round(time.perf_counter() - settled, 4), **phases}
            if "baseline" not in outcome:
                return {}, failure or str(outcome.get("error", {}).get("message")
                                          or "the baseline worker sent no result"), kind or "error"
            profiles = outcome.get("baseline_profiles") or {}
            errors = dict(profiles.get("errors") or {})
            if failure:  # after the times: in the profiled forwards
                errors = {name: f"the worker failed in the profiled forward: {failure[:300]}"
                          for name in config.baselines} | errors
            return {**outcome["baseline"], "profiles": profiles.get("profiles") or {}, "profile_errors": errors,
                    "wall_s": outcome["wall_s"], "reference_error": outcome.get("baseline_reference_error"),
                    "degenerate": (outcome.get("baseline_degenerate") or {}).get("reason")}, "", ""

        def compute() -> dict[str, Any]:
            # Each baseline is timed in `baseline_workers` fresh workers and the median worker's
            # time is kept: one worker's median can land ~25% off for short kernels and
            # host-bound models, and the candidate is timed in one worker (two when it
            # claims a milestone, the slower kept: EvalConfig.confirm_faster), so the
            # fastest of several would make the reference slower than itself. A failed worker
            # counts only when no worker measured the baseline. With three workers, the third runs
            # only when the first two disagree by more than `baseline_agreement` on what a
            # speedup uses (_workers_agree): the median of three lies between the first two
            # whatever the third measures.
            entry: dict[str, Any] = {"errors": {}}
            if not config.baselines:
                return entry
            samples: dict[str, list[dict[str, Any]]] = {name: [] for name in config.baselines}

            def paired_ratios() -> list[float]:  # each worker's eager-over-compile ratio, where measured
                return [p["eager_over_compile"] for p in entry.get("compile_pairings", []) if "eager_over_compile" in p]

            profiles: dict[str, list[Any]] = {name: [] for name in config.baselines}  # beside samples
            errors = []
            named_errors: dict[str, str] = {}  # why a worker that ran measured no time for a baseline
            transient = False  # a worker timed out or died: the failure may not recur
            for started in range(config.baseline_workers):
                if started == 1 and _device_bound(samples, config):
                    break
                if started == 2 and config.baseline_workers == 3 and _workers_agree(samples, paired_ratios(), config):
                    break
                measured, error, failed_how = measure_once()
                if error:
                    errors.append(error)
                    transient = transient or failed_how in ("timeout", "died")
                    if failed_how == "timeout" and not any(samples.values()):
                        break  # a reference that hangs costs one timeout, not one per worker
                    continue
                if isinstance(measured.get("degenerate"), str):  # decided once per task (_Judgement.degenerate)
                    entry.setdefault("degenerate", measured["degenerate"][:500])
                reference_error = complete_reference_error(measured.get("reference_error"), config.correctness_trials)
                if reference_error is not None:  # given to this task's later jobs, and kept with the times
                    self.setup.reference_errors.setdefault(error_key, reference_error)
                for name in config.baselines:
                    if not measured.get(name) and (measured.get("errors") or {}).get(name):
                        named_errors[name] = str(measured["errors"][name])
                    if measured.get(name):
                        samples[name].append(measured[name])
                        table = measured["profiles"].get(name)  # the kernels, or why there are none
                        if table is None:
                            table = measured["profile_errors"].get(name, "the baseline worker sent no profile")
                        elif not table:
                            table = "no CUDA kernel ran in the profiled forward"
                        profiles[name].append(table)
                if "compile_pairing" in measured:
                    entry.setdefault("compile_pairings", []).append(measured["compile_pairing"])
                entry.setdefault("worker_wall_s", []).append(measured["wall_s"])
                if "compile_warmup_s" in measured:
                    entry.setdefault("compile_warmup_s", []).append(measured["compile_warmup_s"])
                    entry.setdefault("compile_cache", []).append(measured.get("compile_cache") or {})
                worker_memory = measured.get("memory") or {}
                peak = worker_memory.get("peak_gib")
                if peak is not None:
                    entry["peak_gib"] = max(float(peak), entry.get("peak_gib", 0.0))
                    entry.setdefault("worker_memory", []).append(
                        {key: worker_memory[key] for key in ("peak_gib", "peak_allocated_gib", "peak_phase",
                                                             "phase_peak_gib") if key in worker_memory})
            known = self.setup.reference_errors.get(error_key)
            if known is not None:  # measured by these workers, or given to them: kept with their times
                entry.setdefault("reference_errors", {})[error_key] = known
            if backend == "cuda":
                entry["profiles"] = {}
            for name in config.baselines:
                order = sorted(range(len(samples[name])), key=lambda i: samples[name][i]["median_ms"])
                kept = order[(len(order) - 1) // 2] if order else None  # the median worker (lower of two)
                entry[name] = samples[name][kept] if kept is not None else None
                if backend == "cuda" and kept is not None:
                    entry["profiles"][name] = profiles[name][kept]  # the kept worker's profiled forward
                entry[f"{name}_worker_medians_ms"] = [stats["median_ms"] for stats in samples[name]]
                entry[f"{name}_worker_methods"] = [stats.get("method") for stats in samples[name]]
                if not samples[name]:
                    entry["errors"][name] = (named_errors.get(name) or (errors[-1] if errors else None)
                                             or "the baseline worker reported no time")
                    if transient and name not in named_errors:  # measured again later (baselines.entry_serves)
                        entry["failed_at"] = [time.time()]
            if pair_baselines:  # the median worker's ratio, else why none was measured. Of two, the
                # higher: it makes compile the faster, so it is never in a candidate's favour.
                ratios = sorted(paired_ratios())
                entry["compile_pairing"] = ({"eager_over_compile": ratios[len(ratios) // 2]} if ratios else
                                            next(iter(entry.get("compile_pairings", [])), {"skipped": "not measured"}))
            return entry

        entry = self.cache.get(key, compute, self.needed(backend, config))
        # A cached entry's float64 measurement (made by its first baseline worker, after the timings):
        # this run's jobs of the task are given it, as the workers that timed these baselines were.
        known = complete_reference_error((entry.get("reference_errors") or {}).get(error_key), config.correctness_trials)
        if known is not None:
            self.setup.reference_errors.setdefault(error_key, known)
        return entry
