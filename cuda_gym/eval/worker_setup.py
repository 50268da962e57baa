"""What the evaluator gives its workers: the platform probe, the timer's hold kernel, each role's
`WorkerSpec` and environment, and the job every stage sends (task, sizes, seed, timing settings).

The build, baseline and eval stages (builds.py, baseline_runs.py, evaluator.py) share one
`WorkerSetup`, so a worker of any role sees the same caches, the same timer and the same fp32
reference measurements.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from . import cupy_support, triton_support
from .config import EvalConfig, held_timing_enabled
from .pool import READY_TIMEOUT_S, Worker, WorkerDied, WorkerSpec, WorkerTimeout
from .timing import HOLD_LIBRARY_ENV, build_hold_library

COMPILER_FILE_MB = 512.0  # file-size cap of workers that run a compiler (build, baseline)
# Spare workers the pool starts together per backend and role once the last is taken (pool.py): a
# CUDA worker's start (fork, CUDA context, warm-up kernels) is paid by the job that waits for it,
# and idle spares cost a CUDA context each. On a 2-core CPU one start is cheap and a batch is not.
SPARE_WORKERS = {"cuda": {"eval": 3, "baseline": 2}, "cpu": {"eval": 1, "baseline": 0}}


def default_cache_dir() -> Path:
    return Path(os.environ.get("CUDA_GYM_CACHE") or Path.home() / ".cache" / "cuda_gym")


def probe_platform(run_dir: Path, backend: str) -> dict[str, Any]:
    """What a fresh worker of `backend` finds: backend, device, capability, torch version."""
    worker = Worker(WorkerSpec(role="probe", backend=backend, root=run_dir, isolate_network=False))
    try:
        message = worker.receive(time.monotonic() + READY_TIMEOUT_S)
        if message.kind != "probe":
            raise RuntimeError(f"worker probe failed: {message.meta}")
        return message.meta
    except (WorkerDied, WorkerTimeout) as exc:
        raise RuntimeError(f"could not start a worker process: {exc}\n{worker.log_tail(4000)}") from None
    finally:
        worker.kill()


def prepare_hold_library(cache_dir: Path, backend: str, platform: dict[str, Any]) -> tuple[bool, str | None]:
    """The timer's hold kernel, built here (trusted) into `<cache>/timer`, which workers can read
    but not write; (whether CUDA repeats are held, the library for the workers)."""
    capability = platform.get("capability")
    if backend != "cuda" or not capability or not held_timing_enabled():
        return False, None
    try:
        return True, str(build_hold_library(cache_dir / "timer", tuple(capability)))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"cuda_gym: the timer's hold kernel could not be built, so every CUDA timing repeat is open "
              f"(noisier for short kernels): {exc}", file=sys.stderr)
        return False, None


class WorkerSetup:
    """The specs, environments and jobs of one evaluator's workers.

    reference_errors: the fp32 reference's distance from its float64 twin, per task, sizes, seed
        and draws (`reference_error_key`): a worker measures it once, before any candidate loads,
        and later jobs of the task are handed it instead of measuring again.
    """

    def __init__(self, cache_dir: Path, platform: dict[str, Any], held_timing: bool, hold_library: str | None):
        self.cache_dir = cache_dir
        self.run_dir = cache_dir / "run"
        self.platform = platform
        self.held_timing = held_timing
        self.hold_library = hold_library
        self.reference_errors: dict[str, dict[str, Any]] = {}

    def spec(self, role: str, backend: str, config: EvalConfig, env: dict[str, str]) -> WorkerSpec:
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

    def base_env(self, backend: str) -> dict[str, str]:
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
        if self.hold_library:
            env[HOLD_LIBRARY_ENV] = self.hold_library
        return env

    @staticmethod
    def reference_error_key(task: Task, backend: str, config: EvalConfig) -> str:
        """What a measurement depends on: the draws (task, sizes, seed, how many) and the precision the
        fp32 reference ran and was compared under (TF32 on or off, the elementwise bound's 'bad' count)."""
        return json.dumps([task.id, task.source_hash, task.sizes_for(backend), backend, config.seed,
                           config.correctness_trials, config.precision], sort_keys=True)

    def job(self, task: Task, backend: str, config: EvalConfig, **extra: Any) -> dict[str, Any]:
        known = self.reference_errors.get(self.reference_error_key(task, backend, config))
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
                # Weight copies the memory plan reserves (task_setup.TaskSetup): the candidate's model (or the
                # baseline's fresh reference) and, where pairing applies, the paired reference.
                "model_copies": 1 + (backend in config.host_pairing), **extra}
