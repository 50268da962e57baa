"""`RemoteEvaluator`: the `Evaluator` interface over HTTP, judged by a `cuda-gym serve` service.

A trainer on a machine without a GPU judges candidates on the service's GPUs: `submit()` posts the
task, the candidate and the config and returns a `concurrent.futures.Future[EvalResult]` at once;
one background thread long-polls the service for every pending job. The service journals every
verdict, so a client that lost its futures (a crash, a restart) fetches a verdict later by its job
id (`fetch`). Standard library only: a trainer needs no extra package to be a client.

Failures are errors, never verdicts: a service that cannot be reached (`JudgeUnavailable`), a job
the service lost unjudged in a restart (`JudgeJobLost`) or a request the service refused
(`JudgeRequestError`) raise from `evaluate()` / `Future.result()`, so no reward is made up for a
candidate nobody judged. The protocol: docs/serving.md.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import threading
import time
import urllib.parse
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from .candidate import Candidate
from .config import EvalConfig
from .result import EvalResult, TimingStats

TOKEN_ENV = "CUDA_GYM_JUDGE_TOKEN"  # the bearer token, where no token file is given
API = "/v1"
POLL_WAIT_S = 20.0  # how long one long-poll waits on the service for a verdict
POLL_BATCH = 256  # job ids asked about in one long-poll


class JudgeError(RuntimeError):
    """The remote judge gave no verdict; the message says why and what to do."""


class JudgeUnavailable(JudgeError):
    """The service did not answer (down, unreachable, or slower than the client's timeouts)."""


class JudgeRequestError(JudgeError):
    """The service refused a request (bad token, unknown task, a full queue, a body too large...)."""

    def __init__(self, status: int, message: str):
        super().__init__(f"the judge service refused the request (HTTP {status}): {message}")
        self.status = status


class JudgeJobLost(JudgeError):
    """The service restarted before judging this job: submit the candidate again."""


# ------------------------------------------------------------------------------ wire formats
def config_to_dict(config: EvalConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def config_from_dict(data: dict[str, Any], base: EvalConfig | None = None) -> EvalConfig:
    """`base` (default `EvalConfig()`) with the fields in `data` changed; raises ValueError on an
    unknown field or a value the config rejects."""
    base = base or EvalConfig()
    fields = {f.name: f for f in dataclasses.fields(EvalConfig)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown EvalConfig fields {unknown}")
    changes = {}
    for name, value in data.items():
        default = getattr(base, name)
        if isinstance(default, tuple):
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"EvalConfig.{name} must be a list, got {value!r}")
            value = tuple(value)
        changes[name] = value
    try:
        return base.replace(**changes)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


def task_to_dict(task: Task) -> dict[str, Any]:
    return {"id": task.id, "level": task.level, "name": task.name, "source": task.source, "tags": list(task.tags),
            "sizes": task.sizes, "description": task.description}


def task_from_dict(data: dict[str, Any]) -> Task:
    """A `Task` from `task_to_dict`'s output; raises ValueError when a field is missing or mistyped."""
    try:
        task = Task(id=str(data["id"]), level=int(data["level"]), name=str(data["name"]), source=str(data["source"]),
                    tags=tuple(str(t) for t in data.get("tags") or ()), sizes=dict(data.get("sizes") or {}),
                    description=str(data.get("description") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a task needs id, level, name and source: {type(exc).__name__}: {exc}") from None
    return task


def baselines_from_dict(data: dict[str, Any]) -> dict[str, Any]:
    """`Evaluator.baselines()`'s return value from its JSON form (TimingStats rebuilt)."""
    return {key: (TimingStats(**value) if key in ("eager", "compile") and value else value)
            for key, value in data.items()}


def read_token(token_file: str | Path | None) -> str | None:
    """The bearer token: the first line of `token_file`, else $CUDA_GYM_JUDGE_TOKEN, else None."""
    import os

    if token_file:
        lines = Path(token_file).read_text(encoding="utf-8").split()
        if not lines:
            raise ValueError(f"the token file {token_file} is empty")
        return lines[0]
    return os.environ.get(TOKEN_ENV) or None


# ------------------------------------------------------------------------------ the client
class RemoteEvaluator:
    """Judges candidates on a `cuda-gym serve` service at `url` (http://host:port). Follows
    `EvaluatorInterface` (interface.py), with `submit_many`, `fetch`, `metrics` and `lost_jobs` added.

    token: the service's bearer token (None: $CUDA_GYM_JUDGE_TOKEN, or no token for a localhost
        service started without one).
    config: the EvalConfig sent with every job that names none (default: the service's own).
    connect_timeout_s: how long a request may go unanswered, and how long the service may stay
        unreachable while jobs are pending, before `JudgeUnavailable` is raised.
    job_timeout_s: how long one job may wait for its verdict (a queue on a busy service included).
    """

    def __init__(self, url: str, token: str | None = None, *, config: EvalConfig | None = None,
                 connect_timeout_s: float = 60.0, job_timeout_s: float = 3600.0):
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"the judge URL must be http://HOST:PORT, got {url!r}")
        self.url = f"http://{parsed.hostname}:{parsed.port or 80}"
        self._host, self._port = parsed.hostname, parsed.port or 80
        self._token = token if token is not None else read_token(None)
        self.connect_timeout_s = connect_timeout_s
        self.job_timeout_s = job_timeout_s
        self._local = threading.local()
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[Future, float]] = {}
        self._poller: threading.Thread | None = None
        self._closed = False
        self.info = self._request("GET", "/health")
        self.backend: str = self.info["backend"]
        self.device_name: str = self.info["device"]
        self.torch_version: str = self.info.get("torch_version", "")
        self.config: EvalConfig = config or config_from_dict(self.info["config"])

    # ----------------------------------------------------------------------------------- public
    def evaluate(self, task: Task, candidate: Any, *, backend: str | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        """Judge `candidate` on `task` remotely; raises `JudgeError` when no verdict could be had."""
        return self.submit(task, candidate, backend=backend, config=config).result()

    def submit(self, task: Task, candidate: Any, *, backend: str | None = None,
               config: EvalConfig | None = None) -> Future:
        """Post one job; returns a Future[EvalResult] whose `job_id` names it on the service."""
        return self.submit_many([(task, candidate)], backend=backend, config=config)[0]

    def submit_many(self, jobs: list[tuple[Task, Any]], *, backend: str | None = None,
                    config: EvalConfig | None = None) -> list[Future]:
        """Post many (task, candidate) jobs in one request (the service's batch endpoint)."""
        if self._closed:
            raise RuntimeError("this RemoteEvaluator is closed")
        body = {"jobs": [self._job_body(task, candidate, backend, config) for task, candidate in jobs]}
        job_ids = self._request("POST", "/jobs/batch", body)["job_ids"]
        return [self._track(job_id) for job_id in job_ids]

    def fetch(self, job_id: str, timeout_s: float | None = None) -> EvalResult:
        """The verdict of a job submitted earlier (by this or another client with the same token)."""
        return self._track(job_id).result(timeout=timeout_s)

    def baselines(self, task: Task, *, backend: str | None = None, config: EvalConfig | None = None) -> dict[str, Any]:
        """The service's cached eager / torch.compile times for `task` (`Evaluator.baselines`)."""
        body = {"task": task_to_dict(task), "backend": backend, "config": config_to_dict(config or self.config)}
        return baselines_from_dict(self._request("POST", "/baselines", body, timeout_s=self.job_timeout_s))

    def prewarm(self, tasks: list[Task], *, backend: str | None = None, config: EvalConfig | None = None,
                parallel: int | None = None) -> dict[str, str]:
        """Nothing to do from the client: the service's evaluator warms itself. Returns {}."""
        return {}

    def wait_until_warm(self) -> None:
        """The service's workers warm up between its jobs; a client has nothing to wait for."""

    def metrics(self) -> dict[str, Any]:
        return self._request("GET", "/metrics")

    def lost_jobs(self) -> list[dict[str, Any]]:
        """This client's jobs that the service lost unjudged in a restart (submit them again)."""
        return self._request("GET", "/lost")["jobs"]

    def close(self) -> None:
        """Stop polling; pending futures get `JudgeError` (their verdicts stay fetchable by job id)."""
        self._closed = True
        with self._lock:
            pending, self._pending = self._pending, {}
        for job_id, (future, _) in pending.items():
            future.set_exception(JudgeError(f"the RemoteEvaluator was closed before job {job_id} was judged; "
                                            "its verdict stays fetchable with RemoteEvaluator.fetch(job_id)"))

    def __deepcopy__(self, memo: dict) -> "RemoteEvaluator":
        return self  # shared by design, as Evaluator

    def __enter__(self) -> "RemoteEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------------------------- plumbing
    def _job_body(self, task: Task, candidate: Any, backend: str | None, config: EvalConfig | None) -> dict[str, Any]:
        source = candidate.source if isinstance(candidate, Candidate) else candidate
        if isinstance(source, bytes):
            source = source.decode("utf-8", errors="replace")
        return {"task": task_to_dict(task), "candidate": source, "backend": backend,
                "config": config_to_dict(config or self.config)}

    def _track(self, job_id: str) -> Future:
        future: Future = Future()
        future.job_id = job_id  # type: ignore[attr-defined]
        with self._lock:
            self._pending[job_id] = (future, time.monotonic())
            if self._poller is None or not self._poller.is_alive():
                self._poller = threading.Thread(target=self._poll, name="cuda-gym-remote-judge", daemon=True)
                self._poller.start()
        return future

    def _poll(self) -> None:
        """Long-poll the service for pending jobs until none is left (or the client is closed)."""
        unreachable_since: float | None = None
        while not self._closed:
            with self._lock:
                if not self._pending:
                    self._poller = None
                    return
                job_ids = list(self._pending)[:POLL_BATCH]
                first_deadline = min(since for _, since in self._pending.values()) + self.job_timeout_s
            wait_s = min(POLL_WAIT_S, max(0.05, first_deadline - time.monotonic()))
            try:
                answer = self._request("POST", "/results", {"job_ids": job_ids, "wait_s": wait_s},
                                       timeout_s=wait_s + self.connect_timeout_s)
                unreachable_since = None
            except JudgeUnavailable as exc:
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since >= self.connect_timeout_s:
                    self._fail(job_ids, JudgeUnavailable(f"{exc}; the verdicts of jobs {', '.join(job_ids[:5])}"
                                                         f"{' ...' if len(job_ids) > 5 else ''} may still come: "
                                                         "fetch them with RemoteEvaluator.fetch(job_id) once the "
                                                         "service is back"))
                time.sleep(1.0)
                continue
            except JudgeError as exc:
                self._fail(job_ids, exc)
                continue
            self._settle(answer["jobs"])

    def _settle(self, jobs: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for job in jobs:
            with self._lock:
                entry = self._pending.get(job["job_id"])
            if entry is None:
                continue
            future, since = entry
            status = job["status"]
            if status == "done":
                self._resolve(job["job_id"], result=EvalResult.from_dict(job["result"]))
            elif status == "lost":
                self._resolve(job["job_id"], error=JudgeJobLost(job.get("message") or f"job {job['job_id']} was lost"))
            elif status == "unknown":
                self._resolve(job["job_id"], error=JudgeRequestError(404, job.get("message") or f"no job {job['job_id']}"))
            elif now - since > self.job_timeout_s:
                self._resolve(job["job_id"], error=JudgeUnavailable(
                    f"job {job['job_id']} had no verdict after {self.job_timeout_s:.0f} s (status {status}); the "
                    "service may be overloaded: fetch it later with RemoteEvaluator.fetch(job_id)"))

    def _fail(self, job_ids: list[str], error: JudgeError) -> None:
        for job_id in job_ids:
            self._resolve(job_id, error=error)

    def _resolve(self, job_id: str, *, result: EvalResult | None = None, error: BaseException | None = None) -> None:
        with self._lock:
            entry = self._pending.pop(job_id, None)
        if entry is None:
            return
        if error is not None:
            entry[0].set_exception(error)
        else:
            entry[0].set_result(result)

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)
            self._local.connection = connection
        connection.timeout = timeout_s
        if connection.sock is not None:
            connection.sock.settimeout(timeout_s)
        return connection

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 timeout_s: float | None = None) -> dict[str, Any]:
        """One request with JSON in and out; a dropped keep-alive connection is retried once."""
        headers = {"Content-Type": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        payload = json.dumps(body).encode() if body is not None else None
        limit = getattr(self, "info", {}).get("max_body_bytes")
        if payload is not None and limit and len(payload) > limit:
            raise JudgeRequestError(413, f"the request body is {len(payload)} bytes, over the service's limit of "
                                         f"{limit} bytes (not sent): send fewer or smaller candidates per request")
        timeout_s = timeout_s or self.connect_timeout_s
        for attempt in (1, 2):
            connection = self._connection(timeout_s)
            try:
                connection.request(method, API + path, body=payload, headers=headers)
                response = connection.getresponse()
                data = response.read()
                break
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                connection.close()
                self._local.connection = None
                if attempt == 2 or isinstance(exc, TimeoutError):
                    raise JudgeUnavailable(f"the judge service at {self.url} did not answer {method} {API}{path}: "
                                           f"{type(exc).__name__}: {exc}. Is `cuda-gym serve` running there, and "
                                           "reachable from this machine?") from None
        try:
            answer = json.loads(data) if data else {}
        except json.JSONDecodeError:
            answer = {"detail": data[:300].decode("utf-8", errors="replace")}
        if response.status != 200:
            raise JudgeRequestError(response.status, str(answer.get("detail", answer)))
        return answer
