"""The synthesis pipeline: compose -> deduplicate -> decontaminate -> execution filter -> compile check
-> write. Cheap stages run first; only survivors reach the worker processes.

`synthesize(config)` draws candidates 0, 1, 2, ... from the composer in rounds until `config.n`
tasks pass the execution filter (or `max_candidates` were drawn), keeps the first `n` by candidate
index, compile-checks all of them or a seeded sample, and returns a `SynthResult`; `write_result`
writes the task files, a manifest and the decontamination report. For one seed the composed and
filtered candidates are the same on every run; only a timing measurement that falls near a window
edge (or the batch size it calibrates to) can differ between runs.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from ..tasks.task import BACKENDS
from .catalogue import BATCH, PlanError, seed_catalogue
from .compose import ComposerConfig, RuleComposer, TaskPlan
from .decontaminate import KernelBenchIndex, Match
from .fingerprint import normalized_hash, operator_signature
from .pool import CheckPool
from .render import render

WINDOW_MS = {"cuda": (1.0, 100.0), "cpu": (1.0, 100.0)}
FUNNEL_ORDER = ("composed", "compose_failed", "duplicate", "contaminated_signature", "contaminated_ast", "checked",
                "load", "eager", "timing", "out_of_memory", "mutates_inputs", "magnitude", "nondeterministic", "nonfinite",
                "degenerate", "crash", "timeout", "passed_execution", "surplus", "compile_checked", "compile",
                "compile_mismatch", "stopped_by_time_budget", "tasks")


class Composer(Protocol):
    name: str

    def compose(self, index: int) -> TaskPlan: ...


@dataclass(frozen=True)
class SynthConfig:
    """What to synthesize and how strictly to filter it. The defaults are the recommended setting.

    n: tasks wanted. backend: where the execution filter runs ("cuda" or "cpu"); the other backend's
    sizes come from the cost model only. max_candidates: candidates drawn at most (default 4 * n).
    composer / include_transformers: the rule composer's settings and whether transformers' modules
    join the seed catalogue (default: when installed); both unused when `synthesize` gets a composer.
    kernelbench: KernelBench data for decontamination (default $CUDA_GYM_KERNELBENCH);
    decontaminate=False skips it (the report then says so). compile_check: "all", or how many of the
    kept tasks (a seeded sample) must also pass under torch.compile; 0 skips it. window_ms: the
    eager-time window on `backend` (default 1-100 ms). calibrate_rounds: retries with a rescaled batch
    size for a task outside the window (0: none). output_rms: the allowed RMS of each floating output
    (task-format's O(0.1-100), with margin). workers: filter processes (default: CPU cores on
    cpu, min(8, cores) on cuda); threads_per_worker: torch threads of each CPU worker.
    time_budget_s: stop drawing new candidates after this long (the round in flight finishes and
    the compile check still runs), keeping what passed so far.
    """

    n: int = 100
    backend: str = "cuda"
    seed: int = 0
    max_candidates: int | None = None
    composer: ComposerConfig = field(default_factory=ComposerConfig)
    include_transformers: bool | None = None
    kernelbench: str | None = None
    decontaminate: bool = True
    ast_threshold: float = 0.9
    signature_threshold: float = 1.0
    compile_check: int | str = 50
    window_ms: tuple[float, float] | None = None
    calibrate_rounds: int = 3
    warmup_reps: int = 2
    timing_reps: int = 10
    timing_budget_s: float = 0.5
    draws: int = 5
    output_rms: tuple[float, float] = (1e-3, 1e5)
    workers: int | None = None
    threads_per_worker: int | None = None
    task_timeout_s: float = 120.0
    compile_timeout_s: float = 600.0
    time_budget_s: float | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.n < 1:
            raise ValueError("n must be >= 1")
        if not (self.compile_check == "all" or (isinstance(self.compile_check, int) and self.compile_check >= 0)):
            raise ValueError(f"compile_check must be 'all' or a count >= 0, got {self.compile_check!r}")
        low, high = self.window
        if not 0 <= low < high:
            raise ValueError(f"window_ms must be (low, high) with 0 <= low < high, got {self.window_ms}")

    @property
    def window(self) -> tuple[float, float]:
        return tuple(self.window_ms) if self.window_ms is not None else WINDOW_MS[self.backend]

    @property
    def candidate_budget(self) -> int:
        return self.max_candidates if self.max_candidates is not None else 4 * self.n

    def worker_count(self) -> int:
        cores = os.cpu_count() or 1
        return self.workers or (cores if self.backend == "cpu" else min(8, cores))

    def filter_settings(self) -> dict[str, Any]:
        """The settings a worker's `check_task` reads."""
        low, high = self.window
        sizing = self.composer.sizing
        return {"window_ms": [low, high], "calibration_rounds": self.calibrate_rounds,
                "target_ms": min(max(sizing.target_ms[self.backend], low), high),
                "max_tensor_bytes": sizing.max_tensor_bytes[self.backend], "warmup_reps": self.warmup_reps,
                "timing_reps": self.timing_reps, "timing_budget_s": self.timing_budget_s, "draws": self.draws,
                "output_rms": list(self.output_rms),
                "seed": self.seed, "batch_name": BATCH}


@dataclass
class SynthTask:
    """A kept task: its plan (sizes as measured), source, and what the filter saw."""

    plan: TaskPlan
    source: str
    hash: str
    eager_ms: float | None = None
    calibrated: bool = False
    compile_check: str = "not sampled"
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        return f"synth/L{self.plan.level}/{self.plan.name}"

    def record(self, backend: str) -> dict[str, Any]:
        return {"id": self.task_id, "file": f"level{self.plan.level}/{self.plan.name}.py", "level": self.plan.level,
                "ops": self.plan.ops, "signature": list(operator_signature(self.source)), "hash": self.hash,
                "sizes": {b: self.plan.sizes(b) for b in BACKENDS}, "eager_ms": {backend: self.eager_ms},
                "batch_calibrated": self.calibrated, "compile_check": self.compile_check, "outputs": self.outputs}


@dataclass
class SynthResult:
    config: SynthConfig
    tasks: list[SynthTask]
    funnel: Counter
    rejected: list[dict[str, Any]]
    contaminated: list[dict[str, Any]]
    kernelbench: dict[str, Any]
    seconds: dict[str, float]
    device: str = ""

    def op_count_histogram(self) -> dict[int, int]:
        counts = Counter(task.plan.level for task in self.tasks)
        return {level: counts.get(level, 0) for level in range(1, max(counts or [1]) + 1)}

    def funnel_rows(self) -> list[tuple[str, int]]:
        return [(stage, self.funnel[stage]) for stage in FUNNEL_ORDER if stage in self.funnel]


def compose_many(composer: Composer, indices: Sequence[int]) -> list[TaskPlan | PlanError]:
    """Plans (or the PlanError saying why not) for `indices`, in order; composers with a
    `concurrency` attribute (the LLM composer) compose that many at once."""

    def one(index: int) -> TaskPlan | PlanError:
        try:
            return composer.compose(index)
        except PlanError as exc:
            return exc

    threads = int(getattr(composer, "concurrency", 1) or 1)
    if threads <= 1:
        return [one(i) for i in indices]
    with ThreadPoolExecutor(threads) as executor:
        return list(executor.map(one, indices))


ROUND_LIMIT = 256  # candidates per round at most, so a time budget is checked often enough


def _round_size(wanted: int, checked: int, passed: int, left: int, workers: int) -> int:
    rate = passed / checked if checked else 0.75
    return min(left, ROUND_LIMIT, max(math.ceil(wanted / max(rate, 0.05) * 1.2), 2 * workers))


def _check_job(candidate: SynthTask, config: SynthConfig, kind: str) -> dict[str, Any]:
    return {"kind": kind, "source": candidate.source, "backend": config.backend, "task_id": candidate.task_id,
            "sizes": candidate.plan.sizes(config.backend), "config": config.filter_settings()}


def _compose_round(composer: Composer, indices: range, seen: dict[str, int], funnel: Counter,
                   rejected: list[dict[str, Any]]) -> list[SynthTask]:
    """Compose and render `indices`; drop plans that fail and programs seen before (normalized hash)."""
    batch = []
    for plan in compose_many(composer, indices):
        funnel["composed"] += 1
        if isinstance(plan, PlanError):
            funnel["compose_failed"] += 1
            rejected.append({"stage": "compose_failed", "message": str(plan)})
            continue
        source = render(plan)
        digest = normalized_hash(source)
        if digest in seen:
            funnel["duplicate"] += 1
            rejected.append({"candidate": plan.index, "name": plan.name, "stage": "duplicate",
                             "message": f"same program as candidate {seen[digest]}"})
            continue
        seen[digest] = plan.index
        batch.append(SynthTask(plan, source, digest))
    return batch


def _decontaminate(batch: list[SynthTask], index: KernelBenchIndex | None, funnel: Counter,
                   contaminated: list[dict[str, Any]]) -> list[SynthTask]:
    clean = []
    for candidate in batch:
        match = index.match(candidate.source) if index is not None else None
        if match is None:
            clean.append(candidate)
            continue
        funnel[f"contaminated_{match.test}"] += 1
        contaminated.append(_contamination_record(candidate, match))
    return clean


def _filter_round(clean: list[SynthTask], config: SynthConfig, pool: CheckPool, funnel: Counter,
                  rejected: list[dict[str, Any]], desc: str) -> list[SynthTask]:
    """The execution checks of `clean` in the workers; the passing tasks, re-rendered at their measured sizes."""
    funnel["checked"] += len(clean)
    results = pool.run([_check_job(c, config, "check") for c in clean], config.task_timeout_s, desc=desc,
                       progress=config.progress)
    passed = []
    for candidate, result in zip(clean, results):
        if not result.get("ok"):
            funnel[result.get("stage", "crash")] += 1
            rejected.append({"candidate": candidate.plan.index, "name": candidate.plan.name,
                             "stage": result.get("stage"), "message": str(result.get("message", ""))[:400],
                             "eager_ms": result.get("eager_ms")})
            continue
        funnel["passed_execution"] += 1
        plan = candidate.plan.with_sizes(config.backend, result["sizes"])
        passed.append(SynthTask(plan, render(plan), candidate.hash, eager_ms=result.get("eager_ms"),
                                calibrated=bool(result.get("calibrated")), outputs=result.get("outputs", [])))
    return passed


def synthesize(config: SynthConfig, composer: Composer | None = None,
               kernelbench_index: KernelBenchIndex | None = None) -> SynthResult:
    """Run the pipeline (see the module docstring). Raises DataNotFoundError when decontamination is
    on and no KernelBench data is found, and pool.WorkerStartError when workers cannot start."""
    started = time.perf_counter()
    seconds: Counter = Counter()
    if composer is None:
        composer = RuleComposer(seed_catalogue(config.include_transformers), config.seed, config.composer)
    index = kernelbench_index
    if index is None and config.decontaminate:
        index = KernelBenchIndex.from_path(config.kernelbench, ast_threshold=config.ast_threshold,
                                           signature_threshold=config.signature_threshold)
    kernelbench = ({"path": config.kernelbench or os.environ.get("CUDA_GYM_KERNELBENCH"), "tasks": len(index),
                    "ast_threshold": index.ast_threshold, "signature_threshold": index.signature_threshold}
                   if index is not None else {"path": None, "skipped": True})
    seconds["setup"] = time.perf_counter() - started
    funnel: Counter = Counter()
    rejected: list[dict[str, Any]] = []
    contaminated: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    kept: list[SynthTask] = []
    next_index = checked = 0
    workers = config.worker_count()
    threads = config.threads_per_worker or (max(1, (os.cpu_count() or 1) // workers) if config.backend == "cpu"
                                            else None)
    with CheckPool(config.backend, workers, threads=threads) as pool:
        while len(kept) < config.n and next_index < config.candidate_budget:
            if config.time_budget_s is not None and time.perf_counter() - started > config.time_budget_s:
                funnel["stopped_by_time_budget"] = 1
                break
            count = _round_size(config.n - len(kept), checked, len(kept), config.candidate_budget - next_index,
                                workers)
            stage_start = time.perf_counter()
            batch = _compose_round(composer, range(next_index, next_index + count), seen, funnel, rejected)
            seconds["compose"] += time.perf_counter() - stage_start
            next_index += count
            stage_start = time.perf_counter()
            clean = _decontaminate(batch, index, funnel, contaminated)
            seconds["decontaminate"] += time.perf_counter() - stage_start
            stage_start = time.perf_counter()
            checked += len(clean)
            kept += _filter_round(clean, config, pool, funnel, rejected,
                                  desc=f"checking candidates {next_index - count}-{next_index - 1}")
            seconds["execution_filter"] += time.perf_counter() - stage_start
        kept.sort(key=lambda t: t.plan.index)
        funnel["surplus"] = max(0, len(kept) - config.n)
        kept = kept[: config.n]
        stage_start = time.perf_counter()
        kept = _compile_check(kept, config, pool, funnel, rejected)
        seconds["compile_check"] = time.perf_counter() - stage_start
        device = pool.device
    funnel["tasks"] = len(kept)
    seconds["total"] = time.perf_counter() - started
    return SynthResult(config=config, tasks=kept, funnel=funnel, rejected=rejected, contaminated=contaminated,
                       kernelbench=kernelbench, seconds={k: round(v, 3) for k, v in seconds.items()}, device=device)


def _contamination_record(candidate: SynthTask, match: Match) -> dict[str, Any]:
    return {"candidate": candidate.plan.index, "name": candidate.plan.name, "ops": candidate.plan.ops,
            **match.to_dict(), "signature": list(match.signature)}


def _compile_check(kept: list[SynthTask], config: SynthConfig, pool: CheckPool, funnel: Counter,
                   rejected: list[dict[str, Any]]) -> list[SynthTask]:
    if config.compile_check == "all":
        chosen = list(kept)
    else:
        count = min(int(config.compile_check), len(kept))
        chosen = sorted(random.Random(f"cuda_gym.synth.compile:{config.seed}").sample(kept, count),
                        key=lambda t: t.plan.index)
    if not chosen:
        return kept
    funnel["compile_checked"] = len(chosen)
    results = pool.run([_check_job(c, config, "compile") for c in chosen], config.compile_timeout_s,
                       desc="torch.compile check", progress=config.progress)
    failed = set()
    for candidate, result in zip(chosen, results):
        if result.get("ok"):
            candidate.compile_check = "passed"
            continue
        failed.add(candidate.plan.index)
        funnel[result.get("stage", "compile")] += 1
        rejected.append({"candidate": candidate.plan.index, "name": candidate.plan.name,
                         "stage": result.get("stage"), "message": str(result.get("message", ""))[:400]})
    return [t for t in kept if t.plan.index not in failed]


# --------------------------------------------------------------------------------------- writing
MANIFEST = "manifest.json"
DECONTAMINATION_REPORT = "decontamination.json"


class OutputExistsError(FileExistsError):
    """The output directory already holds tasks; the message says how to proceed."""


def write_result(result: SynthResult, out_dir: str | os.PathLike, overwrite: bool = False) -> Path:
    """Write level<k>/<name>.py per task, manifest.json and decontamination.json under `out_dir`.
    An earlier synthesis output there (a manifest.json) is replaced only with `overwrite`, which
    removes the files that manifest lists first; task files without a manifest are never touched."""
    out = Path(out_dir)
    manifest_path = out / MANIFEST
    if manifest_path.exists():
        if not overwrite:
            raise OutputExistsError(f"{out} already holds a synthesis output ({MANIFEST}); choose another --out "
                                    "or pass --overwrite to replace it")
        try:
            old = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise OutputExistsError(f"{manifest_path} cannot be read ({exc}); remove {out} by hand") from None
        for record in old.get("tasks", []):
            path = out / str(record.get("file", ""))
            if path.suffix == ".py" and path.is_file():
                path.unlink()
        for name in (MANIFEST, DECONTAMINATION_REPORT):
            (out / name).unlink(missing_ok=True)
    elif any(out.glob("level*/*.py")):
        raise OutputExistsError(f"{out} holds level*/*.py files but no {MANIFEST}: it is not a synthesis output; "
                                "choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    for task in result.tasks:
        path = out / f"level{task.plan.level}" / f"{task.plan.name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_whole(path, task.source)
    config = result.config
    manifest = {
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "config": _jsonable(asdict(config)),
        "device": result.device,
        "funnel": dict(result.funnel_rows()),
        "op_count_histogram": result.op_count_histogram(),
        "seconds": result.seconds,
        "tasks": [task.record(config.backend) for task in result.tasks],
        "rejected": result.rejected,
    }
    _write_whole(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    report = {"kernelbench": result.kernelbench,
              "removed": {"signature": result.funnel.get("contaminated_signature", 0),
                          "ast": result.funnel.get("contaminated_ast", 0)},
              "contaminated": result.contaminated}
    _write_whole(out / DECONTAMINATION_REPORT, json.dumps(report, indent=1) + "\n")
    return out


def _write_whole(path: Path, text: str) -> None:
    """Whole files only: a run killed while writing leaves no truncated task or manifest behind."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value
