"""`Evaluator`: judge a candidate against a task and return an `EvalResult`.

Stages, each in a worker process (see pool.py, worker.py): build (a CPU slot, cached by content),
baselines (cached), evaluation (one slot per device). `submit()` returns a future, so callers can
keep the build slots busy while the device evaluates another candidate. No stage raises to the
caller: every failure is a verdict.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import secrets
import statistics
import shutil
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..tasks.task import Task
from .baselines import BaselineCache, baseline_key
from .candidate import Candidate, InvalidCandidate, parse_candidate
from .config import EvalConfig, device_time, held_timing_enabled
from .correctness import ToleranceFloor, compare, degenerate_reason, judge_stats, tolerance_floor, widest_floor
from .logs import trim_compile_log
from .pool import (READY_TIMEOUT_S, Worker, WorkerDied, WorkerPool, WorkerSpec, WorkerTimeout, remove_orphaned_scratch,
                   run_job)
from . import cupy_support, output_digest, sandbox, triton_support
from .protocol import Message
from .result import ErrorCode, EvalResult, TimingStats, TrialResult
from .reward import DEGENERATE_FLAG, claims_milestone
from .timing import HOLD_LIBRARY_ENV, PAIRS, UNTRACKED_WORK_FLAG, build_hold_library

EVALUATOR_VERSION = "0.1"
_INTERNAL_KERNEL_MARKERS = ("at::", "c10::")
BUILD_CACHE_LIMIT = 2000  # build directories kept; the oldest are removed beyond this
COMPILER_FILE_MB = 512.0  # file-size cap of workers that run a compiler (build, baseline)
PREWARM_TIMEOUT_S = 240.0  # a level-3 model's first torch.compile took at most 40 s on the H200
# Spare workers the pool starts together per backend and role once the last is taken (pool.py). A
# CUDA worker's start (fork, CUDA context, warm-up kernels) took about 1 s on the H200, and every
# job waited for it: the eval job for its spare (settle) and the baseline job for a fresh worker.
# With several started together on a many-core host, most jobs find one ready. Idle spares cost
# memory only (a CUDA context each). On the 2-core CPU one start is cheap and a batch would not be.
SPARE_WORKERS = {"cuda": {"eval": 3, "baseline": 2}, "cpu": {"eval": 1, "baseline": 0}}


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDA_GYM_CACHE") or Path.home() / ".cache" / "cuda_gym")


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


class Evaluator:
    """Judges candidates. Use as a context manager, or call `close()`.

    backend: "auto" (cuda when a GPU is visible to a worker, else cpu), "cuda" or "cpu".
    build_workers: concurrent builds (default: half the CPU cores, at least 1).
    baseline_cache: where baseline times are read and stored, an object with `BaselineCache`'s
        `get(key, compute, needed)` (default: `BaselineCache(cache_dir / "baselines.json")`; the
        Ray evaluator passes one that shares entries across its actors).
    """

    def __init__(self, backend: str = "auto", config: EvalConfig | None = None, *,
                 cache_dir: str | Path | None = None, build_workers: int | None = None,
                 baseline_cache: Any = None):
        self.config = config or EvalConfig()
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.run_dir = self.cache_dir / "run"
        for sub in ("run", "builds", "kernels", "inline"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        remove_orphaned_scratch(self.run_dir)
        self._pool = WorkerPool()
        self.platform = self._probe("cuda" if backend in ("auto", "cuda") else "cpu")
        if backend == "cuda" and self.platform["backend"] != "cuda":
            raise RuntimeError("backend='cuda' was requested but no CUDA device is visible to torch; "
                               "use backend='cpu' or check CUDA_VISIBLE_DEVICES and the driver")
        self.backend = self.platform["backend"] if backend == "auto" else backend
        self.torch_version = self.platform["torch_version"]
        self.build_workers = build_workers or max(1, (os.cpu_count() or 2) // 2)
        self._build_slots = threading.Semaphore(self.build_workers)
        self._device_slot = threading.Semaphore(1)
        self._executor = ThreadPoolExecutor(max_workers=self.build_workers + 4, thread_name_prefix="cuda-gym-eval")
        self._baselines = (baseline_cache if baseline_cache is not None
                           else BaselineCache(self.cache_dir / "baselines.json"))
        # The fp32 reference's distance from its float64 twin, per task, sizes, seed and draws: a worker
        # measures it once, before any candidate loads, and later jobs of the task are handed it instead
        # of measuring again (one float64 forward per correctness draw saved per verdict).
        self._reference_errors: dict[str, dict[str, Any]] = {}
        self._header_lock = threading.Lock()
        self._header_checked = False
        self._closed = False
        self.held_timing, self._hold_library = self._prepare_hold_library()

    # ----------------------------------------------------------------------------------- public
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
        entry = self._baseline_entry(task, backend, config or self.config)
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
        waits (on the H200 a level-3 model's first compile took 14-39 s, a later worker's 2-7 s).
        Nothing is timed meanwhile: the device slot is held throughout. Only worth it where compiles
        can run side by side (default `parallel`: half the cores, at most 8; 1 or fewer does
        nothing). Returns {task id: "" or why its prewarm failed}; a failure costs nothing but the
        time (the baseline worker compiles it then, and reports its own errors)."""
        backend = self._check_backend(backend)
        config = config or self.config
        parallel = parallel if parallel is not None else min(8, (os.cpu_count() or 2) // 2)
        cached = getattr(self._baselines, "cached", lambda key, needed: False)
        needed = self._baselines_needed(backend, config)
        todo = [t for t in tasks if not cached(self._baseline_key(t, backend, config), needed)]
        if "compile" not in config.baselines or parallel <= 1 or not todo:
            return {}
        spec = self._spec("baseline", backend, config, self._base_env(backend))
        compile_threads = max(1, (os.cpu_count() or 2) // parallel)  # inductor's own pool, per prewarm

        def prewarm_one(task: Task) -> str:
            worker = None
            outcome: dict[str, Any] = {}
            try:
                worker = Worker(spec)
                run_job(worker, self._job(task, backend, config, prewarm=True, compile_threads=compile_threads),
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

    # ---------------------------------------------------------------------------------- plumbing
    def _check_backend(self, backend: str | None) -> str:
        backend = backend or self.backend
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
        if backend == "cuda" and self.platform["backend"] != "cuda":
            raise ValueError("no CUDA device is visible to the workers; use backend='cpu'")
        return backend

    def _probe(self, backend: str) -> dict[str, Any]:
        worker = Worker(WorkerSpec(role="probe", backend=backend, root=self.run_dir, isolate_network=False))
        try:
            message = worker.receive(time.monotonic() + READY_TIMEOUT_S)
            if message.kind != "probe":
                raise RuntimeError(f"worker probe failed: {message.meta}")
            return message.meta
        except (WorkerDied, WorkerTimeout) as exc:
            raise RuntimeError(f"could not start a worker process: {exc}\n{worker.log_tail(4000)}") from None
        finally:
            worker.kill()

    def _spec(self, role: str, backend: str, config: EvalConfig, env: dict[str, str]) -> WorkerSpec:
        return WorkerSpec(
            role=role, backend=backend, root=self.run_dir, isolate_network=role in ("eval", "build"),
            # Compilers write large files: nvcc/g++ objects in a build, and inductor's precompiled
            # C++ header (~150 MB on an AVX-512 CPU) in a baseline's torch.compile.
            max_file_mb=max(config.max_output_mb, COMPILER_FILE_MB) if role in ("build", "baseline") else config.max_output_mb,
            address_space_gb=config.cpu_memory_limit_gb if backend == "cpu" else None,
            cpu_threads=config.cpu_threads, env=env,
            # CUDA builds yield the CPU to a model being timed (one core of many). Not on the CPU
            # backend: its timed models use every core, and a build there could starve until its
            # wall-clock compile timeout judged a correct candidate.
            yield_cpu=role == "build" and backend == "cuda",
        )

    def _base_env(self, backend: str) -> dict[str, str]:
        # TORCH_EXTENSIONS_DIR: the root of all candidates' build directories (never an inherited
        # value); a job narrows it to its own candidate's.
        env = {"CUDA_GYM_KERNEL_CACHE": str(self.cache_dir / "kernels"),
               "TORCH_EXTENSIONS_DIR": str(self.cache_dir / "inline"), "PYTHONDONTWRITEBYTECODE": "1",
               "CUDA_GYM_PCH_DIR": os.environ.get("CUDA_GYM_PCH_DIR") or str(self.cache_dir / "pch")}
        capability = self.platform.get("capability")
        if backend == "cuda" and capability:
            env["TORCH_CUDA_ARCH_LIST"] = f"{capability[0]}.{capability[1]}"
        env.update(triton_support.worker_env(self.cache_dir, backend))
        env.update(cupy_support.worker_env(self.cache_dir, backend))
        env["CUDA_GYM_TIMER_HOLD"] = "1" if self.held_timing else "0"
        if self._hold_library:
            env[HOLD_LIBRARY_ENV] = self._hold_library
        return env

    def _candidate_key(self, candidate: Candidate, backend: str) -> str:
        text = "\0".join([candidate.source, backend, self.torch_version, self._base_env(backend).get("TORCH_CUDA_ARCH_LIST", "")])
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
        env = self._base_env(backend) | {"TORCH_EXTENSIONS_DIR": str(self.cache_dir / "inline" / key)}
        if not self._build(candidate, key, backend, config, env, result):
            return
        result.compiled = True
        if config.baselines:
            entry = self._baseline_entry(task, backend, config)
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

    def _prepare_hold_library(self) -> tuple[bool, str | None]:
        """The timer's hold kernel, built here (trusted) into `<cache>/timer`, which workers can read
        but not write; (whether CUDA repeats are held, the library for the workers)."""
        capability = self.platform.get("capability")
        if self.backend != "cuda" or not capability or not held_timing_enabled():
            return False, None
        try:
            return True, str(build_hold_library(self.cache_dir / "timer", tuple(capability)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            print(f"cuda_gym: the timer's hold kernel could not be built, so every CUDA timing repeat is open "
                  f"(noisier for short kernels): {exc}", file=sys.stderr)
            return False, None

    # -------------------------------------------------------------------------------------- build
    def _prepare_precompiled_header(self) -> None:
        """Build cuda_gym's precompiled torch/extension.h ($CUDA_GYM_PCH_DIR, else `<cache>/pch`;
        fastbuild.py) once, here, outside any sandbox, before the first load_inline build: the fast
        forms compile their C++ file against it (7.8 s instead of 16-24 s on the H200). Workers
        read it, never write it."""
        with self._header_lock:
            if self._header_checked:
                return
            self._header_checked = True
            started = time.monotonic()
            env = os.environ | self._base_env("cuda")
            try:
                proc = subprocess.run([sys.executable, "-m", "cuda_gym.eval.fastbuild", env["CUDA_GYM_PCH_DIR"]],
                                      capture_output=True, text=True, env=env, timeout=900)
            except subprocess.TimeoutExpired:
                proc = subprocess.CompletedProcess([], 1, "", "timed out after 900 s")
            if proc.returncode != 0 or "built nothing" not in proc.stdout:
                state = "ready" if proc.returncode == 0 else f"failed ({proc.stderr.strip()[-300:]})"
                print(f"cuda_gym: precompiled torch header for load_inline builds {state} after "
                      f"{time.monotonic() - started:.0f} s (once per cache directory)", file=sys.stderr)

    def _build(self, candidate: Candidate, key: str, backend: str, config: EvalConfig, env: dict[str, str],
               result: EvalResult) -> bool:
        marker = self.cache_dir / "builds" / f"{key}.ok"
        if marker.exists():
            result.build_cached = True
            os.utime(marker)
            return True
        if candidate.form == "python":
            return True  # nothing to compile; the policy check will judge it
        if candidate.form == "load_inline" and backend == "cuda":
            self._prepare_precompiled_header()
        started = time.monotonic()
        with self._build_slots:
            worker = self._pool.acquire(self._spec("build", backend, config, env | {"CUDA_VISIBLE_DEVICES": ""}),
                                        spares=0)
            outcome: dict[str, Any] = {}

            def on_message(message: Message) -> bool:
                outcome[message.kind] = message.meta
                return message.kind not in ("built", "error")

            try:
                run_job(worker, {"candidate_source": candidate.source, "env": env | {"CUDA_VISIBLE_DEVICES": ""},
                                 "config": {"precision": config.precision}}, config.compile_timeout_s, on_message)
            except WorkerTimeout:
                outcome["timeout"] = True
            except WorkerDied as exc:
                outcome["died"] = str(exc)
            finally:
                log = worker.log_tail(config.max_log_chars)
                worker.kill()
        result.compile_seconds = round(time.monotonic() - started, 4)
        if "built" in outcome:
            forms = outcome["built"].get("inline_build_forms")  # written by candidate-side code: bounded
            if isinstance(forms, dict):
                result.inline_build_forms = {str(k)[:100]: str(v)[:600] for k, v in list(forms.items())[:20]}
            marker.write_text(f"{backend} torch {self.torch_version}\n")
            self._trim_build_cache()
            return True
        if outcome.get("timeout"):
            result.error_code = ErrorCode.COMPILE_TIMEOUT
            result.message = (f"the build ran past {config.compile_timeout_s:g} s and was stopped; "
                              "simplify the kernel source or use the cuda_gym.native form (no torch headers)")
        elif "error" in outcome:
            error = outcome["error"]
            code = error.get("code", "RUNTIME_ERROR")
            result.error_code = ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.RUNTIME_ERROR
            full = error.get("message", "")
            if result.error_code is ErrorCode.COMPILE_ERROR:
                result.message = "the build failed:\n" + trim_compile_log(full, max_errors=3, max_chars=1500)
            else:
                result.message = "the candidate module raised while it was imported: " + full[:1500]
            log = (full + "\n" + log)[-config.max_log_chars:]
        else:
            result.error_code = ErrorCode.RUNTIME_ERROR
            result.message = f"the candidate crashed while it was imported and built ({outcome.get('died', '')})"
        result.compile_log = log
        return False

    def _trim_build_cache(self) -> None:
        markers = sorted((self.cache_dir / "builds").glob("*.ok"), key=lambda p: p.stat().st_mtime)
        for marker in markers[:-BUILD_CACHE_LIMIT]:
            # The marker first: one left over a half-deleted build would skip that build next time.
            marker.unlink(missing_ok=True)
            shutil.rmtree(self.cache_dir / "inline" / marker.stem, ignore_errors=True)

    # ---------------------------------------------------------------------------------- baselines
    @staticmethod
    def _reference_error_key(task: Task, backend: str, config: EvalConfig) -> str:
        """What a measurement depends on: the draws (task, sizes, seed, how many) and the precision the
        fp32 reference ran and was compared under (TF32 on or off, the elementwise bound's 'bad' count)."""
        return json.dumps([task.id, task.source_hash, task.sizes_for(backend), backend, config.seed,
                           config.correctness_trials, config.precision], sort_keys=True)

    def _job(self, task: Task, backend: str, config: EvalConfig, **extra: Any) -> dict[str, Any]:
        known = self._reference_errors.get(self._reference_error_key(task, backend, config))
        return {"task_id": task.id, "task_source": task.source, "sizes": task.sizes_for(backend),
                "reference_error": known,
                "seed": config.seed, "config": {
                    "correctness_trials": config.correctness_trials, "timing_input_sets": config.timing_input_sets,
                    "warmup_reps": config.warmup_reps, "timing_reps": config.timing_reps,
                    "timing_min_reps": config.timing_min_reps, "timing_budget_s": config.timing_budget_s,
                    "timing_warmup_s": config.timing_warmup_s,
                    "l2_flush": config.l2_flush, "precision": config.precision, "policy": config.policy,
                    "baselines": list(config.baselines), "device_memory_gb": config.device_memory_gb,
                    "device_bound_issue_ratio": config.device_bound_issue_ratio},
                # Weight copies the memory plan reserves (worker._TaskSetup): the candidate's model (or the
                # baseline's fresh reference) and, where pairing applies, the paired reference.
                "model_copies": 1 + (backend in config.host_pairing), **extra}

    def _baseline_key(self, task: Task, backend: str, config: EvalConfig) -> str:
        device = self.device_name if backend == "cuda" else f"cpu x{config.cpu_threads or os.cpu_count()}"
        timer = "held" if backend == "cuda" and self.held_timing else "open"
        return baseline_key(task.id, task.source_hash, task.sizes_for(backend), device, self.torch_version, config, timer)

    @staticmethod
    def _pairs_baselines(backend: str, config: EvalConfig) -> bool:
        """Whether baseline workers pair torch.compile with eager (EvalConfig.host_pairing)."""
        return backend in config.host_pairing and {"eager", "compile"} <= set(config.baselines)

    def _baselines_needed(self, backend: str, config: EvalConfig) -> tuple[str, ...]:
        """What a cached baseline entry must hold to be used as it is."""
        needed = (*config.baselines, "profiles") if backend == "cuda" and config.baselines else tuple(config.baselines)
        return (*needed, "compile_pairing") if self._pairs_baselines(backend, config) else needed

    def _baseline_entry(self, task: Task, backend: str, config: EvalConfig) -> dict[str, Any]:
        key = self._baseline_key(task, backend, config)
        error_key = self._reference_error_key(task, backend, config)
        pair_baselines = self._pairs_baselines(backend, config)

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
                worker = self._pool.acquire(self._spec("baseline", backend, config, self._base_env(backend)),
                                            spares=SPARE_WORKERS[backend]["baseline"])
                try:
                    run_job(worker, self._job(task, backend, config, env=self._base_env(backend),
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
            # time is kept: one worker's median can land ~25% off (seen on the H200 for short
            # kernels and host-bound models), and the candidate is timed in one worker (two when it
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
                    self._reference_errors.setdefault(error_key, reference_error)
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
            known = self._reference_errors.get(error_key)
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

        entry = self._baselines.get(key, compute, self._baselines_needed(backend, config))
        # A cached entry's float64 measurement (made by its first baseline worker, after the timings):
        # this run's jobs of the task are given it, as the workers that timed these baselines were.
        known = complete_reference_error((entry.get("reference_errors") or {}).get(error_key), config.correctness_trials)
        if known is not None:
            self._reference_errors.setdefault(error_key, known)
        return entry

    # -------------------------------------------------------------------------------------- judge
    def _judge(self, task: Task, candidate: Candidate, backend: str, config: EvalConfig, env: dict[str, str],
               result: EvalResult, degenerate: str | None = None) -> None:
        """Judge `candidate` in a fresh eval worker into `result`. `degenerate`: why the task cannot
        tell a kernel from a constant ('' where it can), where its baseline workers decided it."""
        key = secrets.token_bytes(32)  # authenticates the worker's messages (see sandbox.sign)
        judge = _Judgement(config, result, key, degenerate)
        with self._device_slot:
            self._pool.settle()  # no spare warms up while this candidate is on the device
            judge.started = time.monotonic()
            worker = self._pool.acquire(self._spec("eval", backend, config, self._base_env(backend)),
                                        spares=SPARE_WORKERS[backend]["eval"])
            try:
                eager = result.eager_time
                pair = backend in config.host_pairing and eager is not None
                run_job(worker, self._job(task, backend, config, candidate_source=candidate.source, env=env,
                                          channel_key=key.hex(), pair_with_reference=pair,
                                          reference_ms=eager.median_ms if pair else None,
                                          reference_device_time=pair and device_time(eager.method, eager.detail)),
                        config.eval_timeout_s, judge.on_message)
            except WorkerTimeout:
                judge.verdict(ErrorCode.TIMEOUT, f"the evaluation ran past {config.eval_timeout_s:g} s and was "
                              f"stopped (stage: {judge.stage}); look for an infinite loop or a deadlock")
            except WorkerDied as exc:
                judge.verdict(ErrorCode.RUNTIME_ERROR, f"the worker died during {judge.stage}: {exc} "
                              "(a segfault, abort, exit or fatal CUDA error in the candidate)")
            finally:
                log = worker.log_tail(config.max_log_chars)
                worker.kill()
                self._pool.replenish()  # the next spare warms up while the device is idle
            if judge.measured_reference_error:  # a complete measurement, made before the candidate loaded
                self._reference_errors[self._reference_error_key(task, backend, config)] = judge.measured_reference_error
            result.limits_not_applied = [*(worker.ready or {}).get("limits_not_applied", []), *judge.limits_not_applied]
            result.eval_seconds = round(time.monotonic() - judge.started, 4)
        result.runtime_log = (result.runtime_log + log)[-config.max_log_chars:]
        judge.finish()


def complete_reference_error(report: Any, trials: int) -> dict[str, Any] | None:
    """A worker's float64 measurement of the reference (`_TaskSetup.reference_error_meta`) as it is
    kept and given to later jobs, {"draws": [[{"norm", "abs", "bad"} or None per output] per trial],
    "skipped": "", "seconds": 0.0}; None where it was skipped, is not one entry per trial or is malformed."""
    if not isinstance(report, dict) or report.get("skipped") or not isinstance(report.get("draws"), list):
        return None
    if len(report["draws"]) != trials:
        return None
    try:
        draws = [[{key: float(error[key]) for key in ("norm", "abs", "bad")} if error else None for error in draw]
                 for draw in report["draws"]]
    except (TypeError, KeyError, ValueError):
        return None
    values = [value for draw in draws for error in draw if error for value in error.values()]
    if not all(math.isfinite(value) and value >= 0 for value in values):  # it widens tolerances: never NaN or < 0
        return None
    return {"draws": draws, "skipped": "", "seconds": 0.0}


# A paired median more than this factor off the candidate's own median, or the reference's more than
# this off the eager baseline's, is not used: host speeds differ up to ~1.8x between processes on
# the H200 (benchmarks/results/host_noise_cuda_h200_2026-12-04.json), a tampered call by more.
PAIRED_AGREEMENT = 2.0


def _audit_failed(audit: dict[str, Any]) -> bool:
    """Whether audited calls (the op recorder's report) ran PyTorch compute ops, skipped the
    candidate's native code, or found the recorder disabled: what the strict policy forbids."""
    return bool(audit.get("forbidden_ops") or audit.get("without_native") or not audit.get("intact", True))


class _Judgement:
    """Turns a worker's messages into a verdict. Decides on the evaluator's side of the pipe."""

    def __init__(self, config: EvalConfig, result: EvalResult, key: bytes | None = None,
                 degenerate: str | None = None):
        self.config = config
        # Why the task cannot tell a kernel from a constant ('' where it can), None until known:
        # given where an earlier evaluation found it, else found from the reference message.
        self.degenerate = degenerate
        self.result = result
        self.key = key
        self.seq = 0
        self.stage = "setup"
        self.reference: list[list[np.ndarray]] = []
        self.reference_specs: list[list[dict]] = []
        self.distributions: list[str] = []
        self.limits_not_applied: list[str] = []
        self.timing_digests: list[np.ndarray] = []  # the reference's output digest per timed call (output_digest)
        self._arrays: dict[str, list[np.ndarray]] = {}  # the output digests of the timing and pairing messages
        # Per trial and output, the widened tolerances where the fp32 reference is rounding noise (else None).
        self.tolerance_floors: list[list[ToleranceFloor | None]] = []
        self.measured_reference_error: dict[str, Any] | None = None  # the worker's report, when complete
        self.decided = False
        self.timing: dict[str, Any] | None = None
        self.pairing: dict[str, Any] | None = None  # EvalConfig.host_pairing's report, checked in finish()
        self.checks: dict[str, Any] | None = None
        self.kernels: dict[str, Any] | None = None  # the profiled forward after the timing (cuda)
        self.started = time.monotonic()

    def verdict(self, code: ErrorCode, message: str) -> bool:
        if not self.decided:
            self.decided = True
            self.result.error_code = code
            self.result.message = message
        return False  # stop reading: the verdict is in

    def on_message(self, message: Message) -> bool:
        if self.key is not None and message.kind != "ready":
            if not sandbox.verify(self.key, self.seq, message.kind, message.meta, message.arrays):
                return self.verdict(ErrorCode.FORBIDDEN, "a message on the worker's channel failed authentication: "
                                    "it was written by candidate code, not by the worker")
            self.seq += 1
        meta = message.meta
        stage = message.kind if message.kind != "trial" else f"trial{meta.get('index')}"
        self.result.stage_seconds[str(stage)[:32]] = round(time.monotonic() - self.started, 4)
        if message.kind == "ready":
            return True
        if message.kind == "error":
            code = meta.get("code", "RUNTIME_ERROR")
            code = ErrorCode(code) if code in ErrorCode.__members__ else ErrorCode.RUNTIME_ERROR
            self.result.runtime_log += str(meta.get("traceback", ""))
            return self.verdict(code, str(meta.get("message", "")))
        if message.kind == "reference":
            return self._on_reference(message)
        if message.kind == "pairing":
            self.pairing = meta
            self._arrays["pairing"] = message.arrays
            return True
        if message.kind == "loaded":
            self.stage = "timing"
            return True
        if message.kind == "trial":
            return self._on_trial(message)
        if message.kind == "checks":
            return self._on_checks(meta)
        if message.kind == "timing":
            self.timing = meta
            self._arrays["timing"] = message.arrays
            self.stage = "the correctness trials"
            return True
        if message.kind == "memory":
            self._on_memory(meta)
            return True
        if message.kind == "kernels":
            self.kernels = meta
            return True
        return self.verdict(ErrorCode.FORBIDDEN, f"the worker sent an unexpected message {message.kind!r}")

    def _on_memory(self, meta: dict[str, Any]) -> None:
        """The worker's memory peaks (worker._PhaseClock.memory_meta) into `device_memory`. Sent
        after candidate code ran in that process: what is not a finite number (or a short name)
        is left out, never an error, so the verdict stays the checks' to make."""
        def gib(value: Any) -> float | None:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            return float(value) if ok else None

        memory_info = self.result.device_memory
        for key in ("peak_gib", "peak_allocated_gib"):
            value = gib(meta.get(key))
            if value is not None:
                memory_info[key] = value
        if isinstance(meta.get("peak_phase"), str):
            memory_info["peak_phase"] = meta["peak_phase"][:40]
        phases = meta.get("phase_peak_gib")
        if isinstance(phases, dict):
            memory_info["phase_peak_gib"] = {
                str(name)[:40]: [gib(v) for v in pair] for name, pair in list(phases.items())[:20]
                if isinstance(pair, list) and len(pair) == 2 and all(gib(v) is not None for v in pair)}

    def _on_reference(self, message: Message) -> bool:
        if self.stage != "setup":
            return self.verdict(ErrorCode.FORBIDDEN, "the worker sent a second reference message: "
                                "candidate code wrote to the worker's channel")
        self.limits_not_applied = list(message.meta.get("limits_not_applied", []))
        # When each part of the reference stage ended (setup, describe, checksums).
        ended = self.result.stage_seconds.get("reference", 0.0) - float(message.meta.get("seconds", 0.0))
        for part, seconds in dict(message.meta.get("parts_s", {})).items():
            ended += float(seconds)
            self.result.stage_seconds[f"reference.{part}"[:32]] = round(ended, 4)
        self.reference_specs = message.meta.get("outputs", [])
        offset = 0
        for specs in self.reference_specs:
            self.reference.append(message.arrays[offset: offset + len(specs)])
            offset += len(specs)
        self.distributions = message.meta.get("distributions", [])
        self.timing_digests = list(message.arrays[offset:])
        self.result.device_memory = {k: float(v) for k, v in dict(message.meta.get("memory", {})).items()}
        noise = self._read_reference_error(message.meta.get("reference_error"))
        if self.degenerate is None:  # not yet known for this task (Evaluator keeps it with the baselines)
            self.degenerate = degenerate_reason(self.reference[: self.config.correctness_trials],
                                                self.tolerance_floors, self.config)
        reason = self.degenerate
        warnings = [f"{reason}; this task cannot tell a kernel from a constant, so speed earns nothing here "
                    "(reward at most 1)"] if reason else []
        if reason:
            self.result.flags.append(DEGENERATE_FLAG)
        if noise:
            self.result.flags.append("reference_rounding_noise")
            warnings.append(noise)
        if warnings:
            self.result.message = "warning: " + "; ".join(warnings)
        self.stage = "loading the candidate"
        return True

    def _read_reference_error(self, report: Any) -> str:
        """The worker's measurement of the fp32 reference against its float64 twin, made before the
        candidate existed, by this worker or, after its timings, by the task's first baseline worker
        (`_TaskSetup._measure_reference_error`; 'seconds' 0 where given): sets `tolerance_floors` and
        `result.reference_error`. Returns what to tell the user where tolerances were widened, else ''."""
        report = report if isinstance(report, dict) else {}
        trials = len(self.reference)
        complete = complete_reference_error(report, trials)
        if complete is None:
            self.result.reference_error = {"skipped": str(report.get("skipped") or "not measured")[:500]}
            return ""
        self.measured_reference_error = complete
        errors = complete["draws"]
        self.tolerance_floors = [[tolerance_floor(error, self.config) for error in draw] for draw in errors]
        measured = [[error for error in draw if error] for draw in errors]
        self.result.reference_error = {
            "rel_norm": [max((e["norm"] for e in draw), default=0.0) for draw in measured],
            "max_abs": [max((e["abs"] for e in draw), default=0.0) for draw in measured],
            "seconds": float(report.get("seconds", 0.0))}
        widened = [index for index, floors in enumerate(self.tolerance_floors) if any(floors)]
        if not widened:
            return ""
        policy = self.config.rel_norm_tolerance
        rel_norm = [max([policy] + [f.rel_norm for f in floors if f]) for floors in self.tolerance_floors]
        absolute = [max(f.abs for f in floors if f) if any(floors) else None for floors in self.tolerance_floors]
        self.result.reference_error.update(multiple=self.config.reference_noise_multiple,
                                           rel_norm_tolerance=rel_norm, abs_tolerance=absolute)
        worst = max(self.result.reference_error["rel_norm"][i] for i in widened)
        widest_abs = max(absolute[i] for i in widened)
        return (f"the fp32 reference is itself up to {worst:.3g} of its norm from its float64 twin on "
                f"{len(widened)} of {trials} draws (the {self.config.precision} tolerance is {policy:g}), so "
                f"those draws are judged at {self.config.reference_noise_multiple:g} times the reference's own error: "
                f"relative error up to {max(rel_norm):.3g}, every element within {widest_abs:.3g} "
                "(EvalResult.reference_error)")

    def _on_trial(self, message: Message) -> bool:
        meta = message.meta
        index = int(meta.get("index", -1))
        if not 0 <= index < len(self.reference) or index != len(self.result.trials):
            return self.verdict(ErrorCode.FORBIDDEN, "the worker reported trials out of order")
        if meta.get("tampered"):
            return self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process: "
                                + ", ".join(meta["tampered"]))
        if not meta.get("recording_intact", False):
            return self.verdict(ErrorCode.FORBIDDEN, "the candidate disabled or replaced the ATen op recorder")
        trial = self._compare_trial(index, meta.get("outputs", []), message.arrays)
        if meta.get("mutated_inputs"):
            trial.passed = False
            trial.message = f"the forward modified its input(s) {meta['mutated_inputs']}; inputs must stay unchanged"
        self.result.trials.append(trial)
        if not trial.passed:
            return self.verdict(ErrorCode.INCORRECT, f"trial {index} ({trial.distribution} inputs): {trial.message}")
        return True

    def _compare_trial(self, index: int, specs: list[dict], arrays: list[np.ndarray]) -> TrialResult:
        """Whole outputs are compared here; large ones by the worker's statistics AND here on a sample."""
        distribution = self.distributions[index]
        ref_specs = self.reference_specs[index]
        floors = self.tolerance_floors[index] if index < len(self.tolerance_floors) else []
        if len(specs) != len(ref_specs) or len(arrays) != len(specs):
            return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                               f"returned {len(specs)} outputs, the reference returns {len(ref_specs)}")
        for position, (spec, ref_spec) in enumerate(zip(specs, ref_specs)):
            label = f"output {position}" if len(ref_specs) > 1 else "output"
            if spec.get("shape") != ref_spec["shape"]:
                return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                                   f"{label} has shape {tuple(spec.get('shape', ()))}, expected {tuple(ref_spec['shape'])}")
            if not ref_spec["full"]:
                stats = spec.get("stats")
                if not isinstance(stats, dict):
                    return TrialResult(distribution, False, float("inf"), float("inf"), float("inf"),
                                       f"{label}: no error statistics (dtype {spec.get('dtype')}, expected {ref_spec['dtype']})")
                size = int(np.prod(ref_spec["shape"]))
                failure = judge_stats({k: float(stats.get(k, float("inf"))) for k in
                                       ("nonfinite", "abs", "rel", "norm", "bad")}, label, size, self.config,
                                      floors[position] if position < len(floors) else None)
                if failure:
                    return TrialResult(distribution, False, float(stats.get("abs", float("inf"))),
                                       float(stats.get("rel", float("inf"))), float(stats.get("norm", float("inf"))), failure)
        trial = compare(arrays, self.reference[index], cand_dtypes=[s.get("dtype") for s in specs],
                        ref_dtypes=[s["dtype"] for s in ref_specs], config=self.config, distribution=distribution,
                        floors=floors)
        for spec in specs:  # report the whole-output errors where the worker measured them
            stats = spec.get("stats") or {}
            trial.max_abs_error = max(trial.max_abs_error, float(stats.get("abs", 0.0)))
            trial.max_rel_error = max(trial.max_rel_error, float(stats.get("rel", 0.0)))
            trial.rel_norm_error = max(trial.rel_norm_error, float(stats.get("norm", 0.0)))
        return trial

    def _on_checks(self, meta: dict[str, Any]) -> bool:
        self.checks = meta
        self.stage = "the kernel check"
        self.result.flags += list(meta.get("flags", []))
        forbidden = meta.get("forbidden_ops") or {}
        self.result.forbidden_ops = sorted(forbidden)
        triton_support.apply_report(self.result, meta.get("triton"))
        cupy_support.apply_report(self.result, meta.get("cupy"))
        if meta.get("tampered"):
            return self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process: "
                                + ", ".join(meta["tampered"]))
        if self.config.policy == "strict":
            if forbidden:
                ops = ", ".join(f"{op} x{n}" for op, n in sorted(forbidden.items()))
                return self.verdict(ErrorCode.FORBIDDEN, f"the forward ran PyTorch compute ops on the task's data "
                                    f"({ops}); under the strict policy that compute must run in the candidate's own "
                                    "kernels (constants made in the forward may be computed and moved)")
            if int(meta.get("native_calls", 0)) == 0:
                return self.verdict(ErrorCode.FORBIDDEN, "the forward never called the candidate's native code "
                                    "(load_kernels functions, load_inline module functions, Triton or CuPy kernel "
                                    "launches)")
        return True

    def _on_kernels(self) -> None:
        """The profiled forward after the timing: which GPU kernels ran (strict: one of the candidate's own)."""
        kernels = self.kernels or {}
        self.result.kernels = [str(k) for k in kernels.get("kernels", [])][:50]
        self.result.kernel_profile = [dict(entry) for entry in kernels.get("profile", [])]
        if kernels.get("tampered"):
            self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process: "
                         + ", ".join(kernels["tampered"]))
            return
        if self.config.policy != "strict":
            return
        audit = kernels.get("audit") or {}
        if _audit_failed(audit):
            self.verdict(ErrorCode.FORBIDDEN, "the profiled forward behaved differently from the correctness "
                         "trials (PyTorch compute ops, no call of the candidate's native code, or the op recorder "
                         "disabled)")
            return
        library = cupy_support.library_kernels(self.result.kernels, (self.checks or {}).get("cupy"),
                                               _INTERNAL_KERNEL_MARKERS)
        if library:
            self.verdict(ErrorCode.FORBIDDEN, "the forward ran CuPy array operations on the GPU (kernels: "
                         f"{', '.join(library[:5])}); under the strict policy CuPy's own routines are judged as "
                         "PyTorch compute is: the compute must run in the candidate's own RawKernel / RawModule kernels")
            return
        own = [k for k in self.result.kernels
               if not any(m in k for m in _INTERNAL_KERNEL_MARKERS) and not k.startswith(cupy_support.LIBRARY_PREFIX)]
        if not own:
            self.verdict(ErrorCode.FORBIDDEN, "no kernel of the candidate's own ran on the GPU during the forward")

    def _on_timing(self) -> None:
        timing = self.timing or {}
        if timing.get("tampered"):
            self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process while it was timed: "
                         + ", ".join(timing["tampered"]))
            return
        inputs, digests = timing.get("digest_inputs", []), self._arrays.get("timing", [])
        if not inputs or len(inputs) != len(digests) or len(inputs) < int((timing.get("stats") or {}).get("reps", 1)):
            self.verdict(ErrorCode.FORBIDDEN, "the timing report has fewer output digests than timed calls")
            return
        # Where the reference is rounding noise, the widest widened tolerance stands for every timed
        # call (their inputs are draws whose reference error was not measured).
        floor = widest_floor(self.tolerance_floors)
        expected = self.timing_digests
        for rep, (which, got) in enumerate(zip(inputs, digests)):
            if not isinstance(which, int) or not 0 <= which < len(expected):
                self.verdict(ErrorCode.FORBIDDEN, f"timed call {rep} reports an input that was never given")
                return
            wrong = output_digest.mismatch(got, expected[which], self.config, floor)
            if wrong:
                self.verdict(ErrorCode.INCORRECT, f"timed call {rep} returned a wrong result ({wrong}): every timed "
                             "call is held to the trials' tolerances; outputs cached, skipped, computed differently "
                             "when timed, or finished after the call returned fail here")
                return
        if UNTRACKED_WORK_FLAG in timing.get("flags", []):
            self.verdict(ErrorCode.INCORRECT, "timed calls left work running on another stream after they returned "
                         "(the device was still busy after the current stream finished): a caller would read an "
                         "unfinished output. Join side streams and library streams to the current stream (an "
                         "event wait) before forward returns")
            return
        audit = timing.get("audit") or {}
        if self.config.policy == "strict" and _audit_failed(audit):
            ops = ", ".join(f"{op} x{n}" for op, n in sorted((audit.get("forbidden_ops") or {}).items()))
            self.verdict(ErrorCode.FORBIDDEN, "timed calls behaved differently from the correctness trials: "
                         + (f"they ran PyTorch compute ops ({ops})" if ops else
                            "the op recorder was disabled" if not audit.get("intact", True) else
                            f"{audit.get('without_native')} of them never called the candidate's native code"))
            return
        self.result.candidate_time = TimingStats(**timing["stats"])
        self.result.flags += list(timing.get("flags", []))

    def _on_pairing(self) -> None:
        """EvalConfig.host_pairing's report, reduced here from the raw per-pair times: each pair's
        candidate output must match the reference's own output on the same input (the timed calls'
        checksum tolerance; pairs where the reference is not finite are left out), or the verdict is
        INCORRECT; a change to the process, or (strict) PyTorch compute in an audited paired call, is
        FORBIDDEN. The pairing stands only if its medians agree within PAIRED_AGREEMENT with the
        candidate's own timing and the eager baseline; then `EvalResult.host_pairing` is set."""
        pairing = self.pairing
        if pairing is None:
            return
        if pairing.get("tampered"):
            self.verdict(ErrorCode.FORBIDDEN, "the candidate changed the evaluation process during its paired "
                         "timing: " + ", ".join(pairing["tampered"]))
            return
        audit = pairing.get("audit") or {}  # also where the pairing stopped on the reference's failure
        if self.config.policy == "strict" and _audit_failed(audit):
            self.verdict(ErrorCode.FORBIDDEN, "paired timing calls behaved differently from the correctness trials "
                         "(PyTorch compute ops, no call of the candidate's native code, or the op recorder disabled)")
            return
        if "skipped" in pairing:
            self.result.host_pairing = {"skipped": str(pairing["skipped"])}
            return
        digests = self._arrays.get("pairing", [])
        candidate_inputs, reference_inputs = pairing.get("candidate_inputs", []), pairing.get("reference_inputs", [])
        if len(candidate_inputs) + len(reference_inputs) != len(digests):
            self.verdict(ErrorCode.FORBIDDEN, "the paired timing report's output digests do not match its calls")
            return
        candidate = dict(zip(candidate_inputs, digests[:len(candidate_inputs)]))
        reference = dict(zip(reference_inputs, digests[len(candidate_inputs):]))
        rows = pairing.get("pairs", [])
        if not rows or any(int(row[0]) not in candidate or int(row[0]) not in reference for row in rows):
            self.verdict(ErrorCode.FORBIDDEN, "the paired timing report lacks output digests of some pairs")
            return
        floor = widest_floor(self.tolerance_floors)
        ratios, candidate_ms, reference_ms = [], [], []
        for index, cand_ms, ref_ms in rows:
            want, got = reference[int(index)], candidate[int(index)]
            if not np.isfinite(want).all():
                continue  # this rotation breaks the reference: not a comparison
            wrong = output_digest.mismatch(got, want, self.config, floor)
            if wrong:
                self.verdict(ErrorCode.INCORRECT, f"a paired timing call returned a result that differs from the "
                             f"reference's on the same input ({wrong}): the candidate computed differently while "
                             "it was timed against the reference")
                return
            if cand_ms > 0 and ref_ms > 0:
                ratios.append(ref_ms / cand_ms)
                candidate_ms.append(cand_ms)
                reference_ms.append(ref_ms)
        if len(ratios) < PAIRS[0] // 2:
            self.result.host_pairing = {"skipped": f"only {len(ratios)} comparable pairs"}
            return
        paired = {"ratio": statistics.median(ratios), "pairs": len(ratios),
                  "candidate_ms": statistics.median(candidate_ms), "reference_ms": statistics.median(reference_ms)}
        own, eager = self.result.candidate_time, self.result.eager_time
        for name, paired_ms, other in (("the candidate's own timing", paired["candidate_ms"], own),
                                       ("the eager baseline", paired["reference_ms"], eager)):
            if other is not None and not 1 / PAIRED_AGREEMENT <= paired_ms / other.median_ms <= PAIRED_AGREEMENT:
                # Kept for the record under "measured", never as the pairing's ratio: a skipped
                # pairing sets no speedup (EvalResult.compared_candidate_ms).
                self.result.host_pairing = {"skipped": f"the paired median {paired_ms:.4g} ms is beyond "
                                            f"{PAIRED_AGREEMENT:g}x of {name} ({other.median_ms:.4g} ms)",
                                            "measured": paired}
                return
        self.result.host_pairing = paired

    def finish(self) -> None:
        if self.decided:
            return
        if self.checks is None or len(self.result.trials) < self.config.correctness_trials:
            self.verdict(ErrorCode.RUNTIME_ERROR, f"the worker stopped during {self.stage} without a verdict")
            return
        if self.timing is None:
            self.verdict(ErrorCode.RUNTIME_ERROR, "the worker stopped before timing finished")
            return
        self._on_timing()
        if self.decided:
            return
        self._on_pairing()
        if self.decided:
            return
        if self.result.backend == "cuda":
            if self.kernels is None:
                self.verdict(ErrorCode.RUNTIME_ERROR, "the worker stopped before the profiled forward (kernel check)")
                return
            self._on_kernels()
            if self.decided:
                return
        self.result.correct = True
        trials = self.result.trials
        self.result.max_abs_error = max(t.max_abs_error for t in trials)
        self.result.max_rel_error = max(t.max_rel_error for t in trials)
        self.result.rel_norm_error = max(t.rel_norm_error for t in trials)
        message = self.result.message
        self.verdict(ErrorCode.OK, message if message.startswith("warning") else "correct")

