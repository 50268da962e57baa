"""`Evaluator`: judge a candidate against a task and return an `EvalResult`.

Stages, each in a worker process (see pool.py, worker.py): build (builds.py: a CPU slot, cached by
content), baselines (baseline_runs.py: cached), evaluation (one slot per device; the verdict is
decided here by judgement.py). `submit()` returns a future, so callers can keep the build slots busy
while the device evaluates another candidate. No stage raises to the caller: every failure is a
verdict.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import os
import secrets
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from .baseline_runs import PREWARM_TIMEOUT_S, BaselineRuns
from .baselines import BaselineCache
from .builds import BUILD_CACHE_LIMIT, Builds
from .candidate import Candidate, InvalidCandidate, parse_candidate
from .config import EvalConfig, device_time
from .judgement import PAIRED_AGREEMENT, Judgement, complete_reference_error
from .pool import WorkerDied, WorkerPool, WorkerTimeout, remove_orphaned_scratch, run_job
from . import triton_support
from .result import ErrorCode, EvalResult, TimingStats
from .reward import claims_milestone
from .worker_setup import (COMPILER_FILE_MB, SPARE_WORKERS, WorkerSetup, default_cache_dir, prepare_hold_library,
                           probe_platform)

EVALUATOR_VERSION = "0.1"

__all__ = ["BUILD_CACHE_LIMIT", "COMPILER_FILE_MB", "EVALUATOR_VERSION", "PAIRED_AGREEMENT", "PREWARM_TIMEOUT_S",
           "SPARE_WORKERS", "Evaluator", "complete_reference_error", "default_cache_dir"]


class Evaluator:
    """Judges candidates. Use as a context manager, or call `close()`. Follows `EvaluatorInterface`
    (interface.py), with `held_timing`, `platform`, `cache_dir` and `build_workers` added.

    backend: "auto" (cuda when a GPU is visible to a worker, else cpu), "cuda" or "cpu".
    build_workers: concurrent builds (default: half the CPU cores, at least 1).
    baseline_cache: where baseline times are read and stored, an object with `BaselineCache`'s
        `get(key, compute, needed)` (default: `BaselineCache(cache_dir / "baselines.json")`; the
        Ray evaluator passes one that shares entries across its actors).
    prepare_during_jobs: the next candidate's eval worker starts and prepares on the CPU (process,
        sandbox, the tripwire's code walk) while the current candidate holds the device, and readies
        the device (the CUDA context, warm-up kernels) when its own job begins (pool.py's
        `defer_device`); otherwise spares warm up, context included, only while the device is idle.
        Meant for the cuda backend: on the cpu backend that preparation shares the cores with the
        model being timed.
    """

    def __init__(self, backend: str = "auto", config: EvalConfig | None = None, *,
                 cache_dir: str | Path | None = None, build_workers: int | None = None,
                 baseline_cache: Any = None, prepare_during_jobs: bool = False):
        self.config = config or EvalConfig()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.run_dir = self.cache_dir / "run"
        for sub in ("run", "builds", "kernels", "inline"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        remove_orphaned_scratch(self.run_dir)
        self._pool = WorkerPool()
        self.platform = probe_platform(self.run_dir, "cuda" if backend in ("auto", "cuda") else "cpu")
        if backend == "cuda" and self.platform["backend"] != "cuda":
            raise RuntimeError("backend='cuda' was requested but no CUDA device is visible to torch; "
                               "use backend='cpu' or check CUDA_VISIBLE_DEVICES and the driver")
        self.backend = self.platform["backend"] if backend == "auto" else backend
        self.torch_version = self.platform["torch_version"]
        self.build_workers = build_workers or max(1, (os.cpu_count() or 2) // 2)
        self._device_slot = threading.Semaphore(1)
        self.prepare_during_jobs = prepare_during_jobs
        self._executor = ThreadPoolExecutor(max_workers=self.build_workers + 4, thread_name_prefix="cuda-gym-eval")
        self._baselines = (baseline_cache if baseline_cache is not None
                           else BaselineCache(self.cache_dir / "baselines.json"))
        self._closed = False
        self.held_timing, hold_library = prepare_hold_library(self.cache_dir, self.backend, self.platform)
        self._setup = WorkerSetup(self.cache_dir, self.platform, self.held_timing, hold_library)
        self._builds = Builds(self._setup, self._pool, self.build_workers, self.torch_version)
        self._baseline_runs = BaselineRuns(self._setup, self._pool, self._device_slot, self._baselines,
                                           self.device_name, self.torch_version)

    def evaluate(self, task: Task, candidate: Any, *, backend: str | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        """Judge `candidate` (source text or `Candidate`) on `task`; never raises for bad candidates."""
        return self.submit(task, candidate, backend=backend, config=config).result()

    def submit(self, task: Task, candidate: Any, *, backend: str | None = None,
               config: EvalConfig | None = None) -> Future:
        """Like `evaluate`, but returns a `concurrent.futures.Future[EvalResult]` at once."""
        if self._closed:
            raise RuntimeError("this Evaluator is closed")
        backend = self._check_backend(backend)
        return self._executor.submit(self._evaluate_safely, task, candidate, backend, config or self.config)

    def baselines(self, task: Task, *, backend: str | None = None, config: EvalConfig | None = None) -> dict[str, Any]:
        """Cached eager / torch.compile times for a task: {'eager': TimingStats|None, 'compile': ...,
        'errors': {name: why}, 'peak_gib': the most a baseline worker's CUDA allocator reserved,
        'profiles': {name: per-kernel table of one profiled forward in the kept worker (cuda only;
        `EvalResult.kernel_profile`'s format), or a string saying why there is none},
        'worker_medians_ms' / 'worker_methods': {name: each fresh worker's median / timing method, in
        the order run}, 'worker_wall_s': [per worker: seconds waiting for spares ('settle'), the whole
        job ('job', process start included) and the worker's own phases], 'compile_pairing': eager's
        paired ratio to torch.compile, the median over the workers (the higher of two), or why none (`EvalResult.compile_pairing`;
        'compile_pairings': every worker's), 'compile_cache': per worker, inductor's graph-cache hits and
        misses in its torch.compile warm-up (`prewarm`), 'worker_memory': per worker (cuda), its peaks
        and the phase of each (`EvalResult.device_memory`'s keys), cached with the times}."""
        backend = self._check_backend(backend)
        entry = self._baseline_runs.entry(task, backend, config or self.config)
        return {name: (TimingStats(**entry[name]) if entry.get(name) else None) for name in ("eager", "compile")} | {
            "errors": entry.get("errors", {}), "peak_gib": entry.get("peak_gib"), "profiles": entry.get("profiles", {}),
            "worker_medians_ms": {name: entry.get(f"{name}_worker_medians_ms") for name in ("eager", "compile")},
            "worker_methods": {name: entry.get(f"{name}_worker_methods") for name in ("eager", "compile")},
            "worker_wall_s": entry.get("worker_wall_s", []), "compile_pairing": entry.get("compile_pairing", {}),
            "compile_pairings": entry.get("compile_pairings", []),
            "compile_cache": entry.get("compile_cache", []), "worker_memory": entry.get("worker_memory", [])}

    def prewarm(self, tasks: list[Task], *, backend: str | None = None, config: EvalConfig | None = None,
                parallel: int | None = None) -> dict[str, str]:
        """Compile the torch.compile baseline of every task in `tasks` whose baselines are not cached
        yet, `parallel` tasks at once, before any of them is timed: each task's baseline workers then
        find its compiled code in the shared inductor cache instead of compiling it while the device
        waits (a level-3 model's first compile takes tens of seconds, a worker's from the cache a few).
        Nothing is timed meanwhile: the device slot is held throughout. Only worth it where compiles
        can run side by side (default `parallel`: half the cores, at most 8; 1 or fewer does
        nothing). Returns {task id: "" or why its prewarm failed}; a failure costs nothing but the
        time (the baseline worker compiles it then, and reports its own errors)."""
        return self._baseline_runs.prewarm(tasks, self._check_backend(backend), config or self.config, parallel)

    def wait_until_warm(self) -> None:
        """Block until the spare workers have started (interpreter, CUDA context, warm-up kernels).
        A spare warms up only while the device is idle (after the previous job), so back-to-back
        evaluations each wait for it; a caller with idle time between evaluations (an RL policy
        generating the next candidate) does not. What "a warm worker" means in
        benchmarks/evaluation_speed.py's latency section."""
        with self._device_slot:  # never beside a job that is taking a spare
            self._pool.settle()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._pool.close()

    def __deepcopy__(self, memo: dict) -> "Evaluator":
        return self  # shared by design (gymnasium deep-copies spec kwargs)

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def device_name(self) -> str:
        return self.platform.get("device", "cpu") if self.backend == "cuda" else "cpu"

    def _check_backend(self, backend: str | None) -> str:
        backend = backend or self.backend
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
        if backend == "cuda" and self.platform["backend"] != "cuda":
            raise ValueError("no CUDA device is visible to the workers; use backend='cpu'")
        return backend

    def _candidate_key(self, candidate: Candidate, backend: str) -> str:
        arch = self._setup.base_env(backend).get("TORCH_CUDA_ARCH_LIST", "")
        text = "\0".join([candidate.source, backend, self.torch_version, arch])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _evaluate_safely(self, task: Task, action: Any, backend: str, config: EvalConfig) -> EvalResult:
        result = EvalResult(task_id=task.id, backend=backend, error_code=ErrorCode.INTERNAL_ERROR,
                            device=self.device_name if backend == "cuda" else "cpu",
                            torch_version=self.torch_version, precision=config.precision, policy=config.policy)
        try:
            self._evaluate(task, action, backend, config, result)
        except Exception as exc:  # noqa: BLE001 - an evaluator bug is still a verdict, not a crash
            result.error_code = ErrorCode.INTERNAL_ERROR
            result.correct, result.speedup_vs_eager, result.speedup_vs_compile = False, None, None  # nothing earned
            result.message = f"evaluator error: {type(exc).__name__}: {exc}"
            result.runtime_log = traceback.format_exc(limit=10)[-config.max_log_chars:]
        return result

    def _evaluate(self, task: Task, action: Any, backend: str, config: EvalConfig, result: EvalResult) -> None:
        try:
            candidate = parse_candidate(action)
        except InvalidCandidate as exc:
            result.error_code, result.message = ErrorCode.INVALID_ACTION, str(exc)
            return
        key = self._candidate_key(candidate, backend)
        result.candidate_hash = key
        result.language = candidate.language
        if backend == "cpu" and candidate.language == "cupy":
            result.error_code = ErrorCode.INVALID_ACTION
            result.message = ("the candidate imports CuPy, whose kernels run on a GPU only: on the cpu backend write "
                              "the kernels as C++ (cuda_gym.native.load_kernels) or in Triton")
            return
        triton_support.apply_report(result, {})  # flags interpreted timings before any is measured
        env = self._setup.base_env(backend) | {"TORCH_EXTENSIONS_DIR": str(self.cache_dir / "inline" / key)}
        if not self._builds.build(candidate, key, backend, config, env, result):
            return
        result.compiled = True
        if config.baselines:
            entry = self._baseline_runs.entry(task, backend, config)
            for name in ("eager", "compile"):
                if entry.get(name):
                    setattr(result, f"{name}_time", TimingStats(**entry[name]))
            result.compile_pairing = dict(entry.get("compile_pairing") or {})
            for name, error in entry.get("errors", {}).items():
                result.flags.append(f"baseline_{name}_failed")
                result.runtime_log += f"[{name} baseline] {error}\n"
        before_judging = copy.deepcopy(result) if config.confirm_faster else None
        # Whether the task is degenerate, as its baseline workers decided (None: an entry from before
        # they did, or no baselines: the judgement decides from the reference message).
        known = entry.get("degenerate") if config.baselines else None
        self._judge(task, candidate, backend, config, env, result, degenerate=known)
        if result.correct and result.candidate_time:
            self._set_speedups(result, config)
            if (before_judging is not None and claims_milestone(result)
                    and not config.device_bound(result.candidate_time.method, result.candidate_time.detail)):
                self._confirm(task, candidate, backend, config, env, result, before_judging)

    def _confirm(self, task: Task, candidate: Candidate, backend: str, config: EvalConfig, env: dict[str, str],
                 result: EvalResult, before_judging: EvalResult) -> None:
        """A second fresh eval worker judges a candidate whose timing claimed a milestone
        (`EvalConfig.confirm_faster`). A failure there, the evaluator's included, is the verdict;
        otherwise the slower of the two candidate times stands, so a lucky process earns nothing.
        The kept worker's flags stand; the other's are kept prefixed `other_worker:`."""
        first = copy.deepcopy(result)
        second = before_judging
        try:
            self._judge(task, candidate, backend, config, env, second)
        except Exception as exc:  # noqa: BLE001 - an unconfirmed claim earns nothing
            second.error_code, second.correct = ErrorCode.INTERNAL_ERROR, False
            second.message = f"evaluator error: {type(exc).__name__}: {exc}"
        confirmed = second.correct and second.candidate_time is not None
        second_is_slower = confirmed and second.compared_candidate_ms() > first.compared_candidate_ms()
        kept, other = (second, first) if not confirmed or second_is_slower else (first, second)
        for item in dataclasses.fields(EvalResult):
            setattr(result, item.name, getattr(kept, item.name))
        result.flags = [*kept.flags, *(f"other_worker:{flag}" for flag in other.flags if flag not in kept.flags)]
        result.eval_seconds = round(first.eval_seconds + second.eval_seconds, 4)
        if confirmed:
            result.candidate_worker_medians_ms = [first.compared_candidate_ms(), second.compared_candidate_ms()]
            self._set_speedups(result, config)
            return
        result.candidate_worker_medians_ms = [first.compared_candidate_ms()]
        claim = ", ".join(f"x{value:.2f} vs {name}" for name, value in
                          (("eager", first.speedup_vs_eager), ("torch.compile", first.speedup_vs_compile)) if value)
        result.message = (f"correct in a first worker ({first.candidate_time.median_ms:.4g} ms, {claim}), then in the "
                          f"confirmation worker: {second.message}")
        result.runtime_log = (f"[first worker]\n{first.runtime_log[-config.max_log_chars // 2:]}\n"
                              f"[confirmation worker]\n{second.runtime_log}")[-config.max_log_chars:]

    @staticmethod
    def _set_speedups(result: EvalResult, config: EvalConfig) -> None:
        """Speedups against the configured baselines' cached times (`EvalResult.baseline_ms`) over
        `EvalResult.compared_candidate_ms`. Where the baseline workers paired torch.compile with
        eager (`EvalResult.compile_pairing`), the speedup vs compile is bridged through eager: the
        speedup vs eager over eager's paired ratio to compile, two ratios each measured within one
        process, instead of a comparison of times from different processes."""
        candidate_ms = result.compared_candidate_ms()
        if not candidate_ms or candidate_ms <= 0:
            return  # no meaningful ratio from a zero time
        baseline = result.baseline_ms()
        if "eager" in config.baselines and baseline["eager"]:
            result.speedup_vs_eager = baseline["eager"] / candidate_ms
        if "compile" in config.baselines and baseline["compile"]:
            eager_over_compile = result.compile_pairing.get("eager_over_compile")
            if eager_over_compile and result.speedup_vs_eager:
                result.speedup_vs_compile = result.speedup_vs_eager / eager_over_compile
            else:
                result.speedup_vs_compile = baseline["compile"] / candidate_ms

    def _judge(self, task: Task, candidate: Candidate, backend: str, config: EvalConfig, env: dict[str, str],
               result: EvalResult, degenerate: str | None = None) -> None:
        """Judge `candidate` in a fresh eval worker into `result`. `degenerate`: why the task cannot
        tell a kernel from a constant ('' where it can), where its baseline workers decided it."""
        key = secrets.token_bytes(32)  # authenticates the worker's messages (see sandbox.sign)
        judge = Judgement(config, result, key, degenerate)
        spec = self._setup.spec("eval", backend, config, self._setup.base_env(backend))
        spec.defer_device = self.prepare_during_jobs
        with self._device_slot:
            self._pool.settle()  # no spare readies the device while this candidate is on it
            judge.started = time.monotonic()
            worker = self._pool.acquire(spec, spares=SPARE_WORKERS[backend]["eval"])
            if spec.defer_device:
                self._pool.replenish(only=spec)  # the next candidate's worker starts now, on the CPU only
            try:
                eager = result.eager_time
                pair = backend in config.host_pairing and eager is not None
                run_job(worker, self._setup.job(task, backend, config, candidate_source=candidate.source, env=env,
                                                channel_key=key.hex(), pair_with_reference=pair,
                                                reference_ms=eager.median_ms if pair else None,
                                                reference_device_time=pair and device_time(eager.method, eager.detail)),
                        config.eval_timeout_s, judge.on_message)
            except WorkerTimeout:
                if judge.stage == "setup":  # no candidate code is in the worker before the reference's message
                    judge.verdict(ErrorCode.TASK_ERROR, f"the task's set-up (the reference's forwards on every draw, "
                                  f"before the candidate loaded) ran past {config.eval_timeout_s:g} s: raise "
                                  "EvalConfig.eval_timeout_s or make the task's sizes smaller")
                else:
                    judge.verdict(ErrorCode.TIMEOUT, f"the evaluation ran past {config.eval_timeout_s:g} s and was "
                                  f"stopped (stage: {judge.stage}); look for an infinite loop or a deadlock")
            except WorkerDied as exc:
                if judge.stage == "setup":
                    judge.verdict(ErrorCode.TASK_ERROR, f"the worker died while setting up the task, before the "
                                  f"candidate loaded: {exc}")
                else:
                    judge.verdict(ErrorCode.RUNTIME_ERROR, f"the worker died during {judge.stage}: {exc} "
                                  "(a segfault, abort, exit or fatal CUDA error in the candidate)")
            finally:
                log = worker.log_tail(config.max_log_chars)
                worker.kill()
                self._pool.replenish()  # the next spare warms up while the device is idle
            if judge.measured_reference_error:  # a complete measurement, made before the candidate loaded
                error_key = self._setup.reference_error_key(task, backend, config)
                self._setup.reference_errors[error_key] = judge.measured_reference_error
            result.limits_not_applied = [*(worker.ready or {}).get("limits_not_applied", []), *judge.limits_not_applied]
            result.eval_seconds = round(time.monotonic() - judge.started, 4)
        result.runtime_log = (result.runtime_log + log)[-config.max_log_chars:]
        judge.finish()
