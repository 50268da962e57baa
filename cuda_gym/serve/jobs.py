"""The service's job book: takes jobs in, hands them to the evaluator, journals their verdicts,
bounds each client's queue, and keeps the numbers `/v1/metrics` reports."""
from __future__ import annotations

import dataclasses
import hashlib
import secrets
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from ..eval.config import EvalConfig
from ..eval.remote import config_from_dict, task_from_dict
from ..eval.result import ErrorCode, EvalResult
from ..tasks.task import Task
from .journal import Journal

# EvalConfig fields that spend the service's time or memory: a client may lower them, never raise
# them above the service's own setting (its operator's limit).
RESOURCE_FIELDS = ("compile_timeout_s", "eval_timeout_s", "baseline_timeout_s", "timing_budget_s",
                   "timing_warmup_s", "timing_reps", "baseline_workers", "correctness_trials", "timing_input_sets",
                   "cpu_memory_limit_gb", "device_memory_gb", "max_output_mb", "max_log_chars")


class JobRefused(Exception):
    """A job the service will not take; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class ServiceLimits:
    """Per-service bounds. Defaults suit one GPU host serving a few trainers."""

    max_queued_per_client: int = 256  # jobs of one client not yet judged
    max_queued: int = 4096  # jobs of all clients not yet judged
    max_batch: int = 256  # jobs in one batch request
    allow_task_source: bool = False  # judge tasks the service does not know (their reference runs in its workers)


@dataclass
class _Stats:
    verdict_times: deque = field(default_factory=deque)  # wall time of each verdict in the last hour
    verdicts: int = 0
    codes: Counter = field(default_factory=Counter)
    build_seconds: float = 0.0
    eval_seconds: float = 0.0
    per_device: dict[str, dict[str, float]] = field(default_factory=dict)


class JobBook:
    """Jobs in, verdicts out. Thread-safe; `on_change` is called (from any thread) after each verdict."""

    def __init__(self, evaluator: Any, journal: Journal, tasks: list[Task], limits: ServiceLimits | None = None):
        self.evaluator = evaluator
        self.journal = journal
        self.tasks = {task.id: task for task in tasks}
        self.limits = limits or ServiceLimits()
        self.base_config: EvalConfig = evaluator.config
        self.on_change: Callable[[], None] = lambda: None
        self.max_body_bytes: int | None = None  # the HTTP layer's limit, told to clients
        self._lock = threading.Lock()
        self._queued: dict[str, str] = {}  # job id -> client, for jobs without a verdict yet
        self._stats = _Stats()
        self.started = time.time()

    # ------------------------------------------------------------------------------- taking jobs
    def resolve_task(self, task_id: str | None, task: dict[str, Any] | None) -> Task:
        if task is not None:
            known = self.tasks.get(str(task.get("id")))
            if known is not None and known.source == task.get("source"):
                return known
            if not self.limits.allow_task_source:
                what = "a task it does not know" if known is None else f"task {known.id} with another source"
                raise JobRefused(400, f"the service was asked to judge {what}; it judges only the tasks "
                                      "`GET /v1/tasks` lists unless started with --allow-task-source")
            try:
                return task_from_dict(task)
            except ValueError as exc:
                raise JobRefused(400, str(exc)) from None
        if task_id is None:
            raise JobRefused(400, "a job needs task_id (a task `GET /v1/tasks` lists) or task (id, level, name, source)")
        if task_id not in self.tasks:
            raise JobRefused(400, f"unknown task {task_id!r}: `GET /v1/tasks` lists the tasks this service judges")
        return self.tasks[task_id]

    def resolve_config(self, overrides: dict[str, Any] | None) -> EvalConfig:
        try:
            config = config_from_dict(overrides or {}, self.base_config)
        except ValueError as exc:
            raise JobRefused(400, f"config: {exc}") from None
        for name in RESOURCE_FIELDS:
            limit, asked = getattr(self.base_config, name), getattr(config, name)
            if limit is not None and (asked is None or asked > limit):
                raise JobRefused(400, f"config: {name}={asked!r} is above this service's limit {limit!r}")
        return config

    def submit(self, client: str, jobs: list[tuple[Task, str, str | None, EvalConfig]]) -> list[str]:
        """Journal and start `jobs` ((task, candidate source, backend, config) each) for `client`;
        all or none are taken. Raises `JobRefused` over a bound."""
        with self._lock:
            mine = sum(1 for owner in self._queued.values() if owner == client)
            if mine + len(jobs) > self.limits.max_queued_per_client:
                raise JobRefused(429, f"this client has {mine} jobs waiting for verdicts; the bound is "
                                      f"{self.limits.max_queued_per_client}: collect verdicts before submitting more")
            if len(self._queued) + len(jobs) > self.limits.max_queued:
                raise JobRefused(503, f"the service has {len(self._queued)} jobs waiting (bound "
                                      f"{self.limits.max_queued}); try again later")
            job_ids = [secrets.token_hex(12) for _ in jobs]
            for job_id in job_ids:
                self._queued[job_id] = client
        try:
            for job_id, (task, candidate, _, _) in zip(job_ids, jobs):
                self.journal.submitted(job_id, client, task.id, hashlib.sha256(candidate.encode()).hexdigest()[:20])
        except OSError as exc:  # a full or failing disk: take nothing (what was journaled reads as lost later)
            with self._lock:
                for job_id in job_ids:
                    self._queued.pop(job_id, None)
            raise JobRefused(503, f"the service could not write its journal ({exc}); try again later") from None
        for job_id, (task, candidate, backend, config) in zip(job_ids, jobs):
            try:
                future = self.evaluator.submit(task, candidate, backend=backend, config=config)
            except Exception as exc:  # noqa: BLE001 - a refused submit is still journaled as a verdict
                future = Future()
                future.set_result(EvalResult(task_id=task.id, backend=backend or "", error_code=ErrorCode.INTERNAL_ERROR,
                                             message=f"the service's evaluator refused the job: "
                                                     f"{type(exc).__name__}: {exc}"))
            future.add_done_callback(lambda done, job_id=job_id, task=task: self._on_verdict(job_id, task, done))
        return job_ids

    def _on_verdict(self, job_id: str, task: Task, done: Future) -> None:
        try:
            result = done.result()
        except BaseException as exc:  # noqa: BLE001 - a cancelled or failed future is still a verdict
            result = EvalResult(task_id=task.id, backend="", error_code=ErrorCode.INTERNAL_ERROR,
                                message=f"the evaluator gave no verdict: {type(exc).__name__}: {exc}")
        self.journal.verdict(job_id, result.to_dict())
        with self._lock:
            self._queued.pop(job_id, None)
            self._count(result)
        self.on_change()

    def _count(self, result: EvalResult) -> None:
        stats, now = self._stats, time.time()
        stats.verdicts += 1
        stats.verdict_times.append(now)
        stats.codes[result.error_code.value] += 1
        stats.build_seconds += result.compile_seconds
        stats.eval_seconds += result.eval_seconds
        device = stats.per_device.setdefault(result.device or result.backend or "unknown",
                                             {"verdicts": 0, "build_seconds": 0.0, "eval_seconds": 0.0})
        device["verdicts"] += 1
        device["build_seconds"] += result.compile_seconds
        device["eval_seconds"] += result.eval_seconds

    # --------------------------------------------------------------------------------- answering
    def status(self, client: str, job_id: str) -> dict[str, Any]:
        """{"job_id", "status": done|queued|lost|unknown, "result" (done), "message" (lost, unknown)}."""
        entry = self.journal.entries.get(job_id)
        if entry is None or entry.client != client:
            return {"job_id": job_id, "status": "unknown",
                    "message": f"no job {job_id} of this client on this service (nor in its journal)"}
        result = self.journal.read_verdict(job_id)
        if result is not None:
            return {"job_id": job_id, "status": "done", "result": result}
        if job_id in self.journal.lost:
            return {"job_id": job_id, "status": "lost",
                    "message": f"job {job_id} (task {entry.task_id}) was accepted before the service restarted and "
                               "never judged: submit the candidate again"}
        return {"job_id": job_id, "status": "queued"}

    def lost_jobs(self, client: str) -> list[dict[str, Any]]:
        return [{"job_id": job_id, "task_id": self.journal.entries[job_id].task_id,
                 "submitted_at": self.journal.entries[job_id].submitted_at}
                for job_id in sorted(self.journal.lost) if self.journal.entries[job_id].client == client]

    def metrics(self) -> dict[str, Any]:
        now = time.time()
        with self._lock:
            stats = self._stats
            while stats.verdict_times and stats.verdict_times[0] < now - 3600:
                stats.verdict_times.popleft()
            uptime_h = max(now - self.started, 1e-9) / 3600
            per_client = Counter(self._queued.values())
            return {
                "queue_depth": len(self._queued),
                "queued_per_client": dict(per_client),
                "verdicts": stats.verdicts,
                "verdicts_last_hour": len(stats.verdict_times),
                # Over the last hour, or over the uptime while that is shorter.
                "verdicts_per_hour": len(stats.verdict_times) / min(uptime_h, 1.0),
                "verdict_codes": dict(stats.codes),
                "build_seconds": stats.build_seconds,
                "eval_seconds": stats.eval_seconds,
                "mean_build_seconds": stats.build_seconds / stats.verdicts if stats.verdicts else None,
                "mean_eval_seconds": stats.eval_seconds / stats.verdicts if stats.verdicts else None,
                "per_device": {name: dict(values) for name, values in stats.per_device.items()},
                "lost_jobs": len(self.journal.lost),
                "journaled_jobs": len(self.journal.entries),
                "uptime_s": now - self.started,
            }

    def info(self) -> dict[str, Any]:
        evaluator = self.evaluator
        return {"status": "ok", "backend": evaluator.backend, "device": evaluator.device_name,
                "torch_version": getattr(evaluator, "torch_version", ""),
                "config": dataclasses.asdict(self.base_config), "tasks": len(self.tasks),
                "lost_jobs": len(self.journal.lost), "allow_task_source": self.limits.allow_task_source,
                "max_body_bytes": self.max_body_bytes, "max_batch": self.limits.max_batch,
                "max_queued_per_client": self.limits.max_queued_per_client}
