"""The HTTP face of the judge service (FastAPI): `make_app(book, tokens)` and its endpoints under /v1.

    GET  /v1/health             the service: backend, device, base config, task count, lost jobs
    GET  /v1/tasks              the tasks it judges by id
    POST /v1/jobs               one job: {task_id | task, candidate, backend?, config?} -> {job_id}
    POST /v1/jobs/batch         {jobs: [job, ...]} -> {job_ids}; all or none are taken
    GET  /v1/jobs/{id}?wait_s=  one job's status and verdict, waiting up to wait_s for it
    POST /v1/results            {job_ids, wait_s} -> {jobs}: returns once one of them is judged (or wait_s)
    GET  /v1/lost               this client's jobs lost unjudged in a restart
    GET  /v1/metrics            queue depth, verdicts per hour, build and eval seconds, per device
    POST /v1/baselines          {task, backend?, config?} -> the evaluator's baselines for the task

With tokens, every request needs `Authorization: Bearer <token>`; each token is one client (its
own jobs and queue bound). Bodies over `max_body_bytes` are refused (413) as soon as that many bytes came.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import time
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from pydantic import BaseModel, Field

from .jobs import JobBook, JobRefused

MAX_WAIT_S = 60.0  # the longest a long-poll is held open
LOCAL_CLIENT = "local"  # the one client of a service without tokens (it listens on localhost only)


class JobRequest(BaseModel):
    task_id: str | None = None
    task: dict[str, Any] | None = None
    candidate: str
    backend: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class BatchRequest(BaseModel):
    jobs: list[JobRequest]


class ResultsRequest(BaseModel):
    job_ids: list[str]
    wait_s: float = 0.0


class BaselinesRequest(BaseModel):
    task_id: str | None = None
    task: dict[str, Any] | None = None
    backend: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


def _json(data: Any) -> Response:
    """JSON as `json.dumps` writes it: verdicts hold infinite errors (Infinity), which Starlette's
    JSONResponse refuses; Python's `json.loads` on the client reads them back exactly."""
    return Response(content=json.dumps(data, separators=(",", ":")), media_type="application/json")


def client_name(token: str) -> str:
    """A token's client name: a short hash, so that the journal never holds a token."""
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:12]


class BodyLimit:
    """ASGI middleware: refuse a request body over `max_bytes` (413), by its Content-Length or, when
    it is streamed without one, as soon as the bytes read pass the limit."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._refuse(send)
        # Read the body here, up to the limit, and hand it on whole: FastAPI would turn an error
        # raised while it reads into a 400.
        chunks, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, _replay([message], receive), send)
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            more = message.get("more_body", False)
            if seen > self.max_bytes:
                # Read on (discarding) to the body's end, so that the client is done sending and reads
                # the 413; a body that goes on past 4x the limit is cut off.
                while more and seen <= 4 * self.max_bytes:
                    message = await receive()
                    seen += len(message.get("body", b""))
                    more = message.get("more_body", False)
                return await self._refuse(send)
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, send: Any) -> None:
        body = (f'{{"detail":"the request body is over this service\'s limit of {self.max_bytes} bytes: '
                'send fewer jobs per batch"}').encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _replay(messages: list[dict], receive: Any) -> Any:
    """An ASGI receive that first returns `messages`, then whatever `receive` gives."""
    queued = list(messages)

    async def replayed() -> dict:
        return queued.pop(0) if queued else await receive()

    return replayed


class _Changes:
    """Wakes long-polls when a verdict lands: a fresh asyncio.Event per round, set from any thread."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.event: asyncio.Event | None = None

    def bind(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def notify(self) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self._bump)

    def _bump(self) -> None:
        event, self.event = self.event, asyncio.Event()
        event.set()


def make_app(book: JobBook, tokens: list[str] | None = None, *, max_body_bytes: int = 8 << 20) -> Any:
    """The ASGI app serving `book`. `tokens`: accepted bearer tokens (None or empty: no auth, and the
    caller must bind to localhost only)."""
    by_digest = {hashlib.sha256(t.encode()).digest(): client_name(t) for t in tokens or []}
    changes = _Changes()
    book.on_change = changes.notify
    book.max_body_bytes = max_body_bytes
    app = FastAPI(title="cuda-gym judge", version="1", docs_url=None, redoc_url=None, openapi_url=None)

    def client(request: Request) -> str:
        if not by_digest:
            return LOCAL_CLIENT
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        digest = hashlib.sha256(token.encode()).digest()
        for known, name in by_digest.items():
            if scheme.lower() == "bearer" and hmac.compare_digest(known, digest):
                return name
        raise HTTPException(401, "missing or wrong bearer token: send `Authorization: Bearer <token>`",
                            headers={"WWW-Authenticate": "Bearer"})

    def refused(exc: JobRefused) -> HTTPException:
        return HTTPException(exc.status, str(exc))

    @app.get("/v1/health")
    def health(who: str = Depends(client)) -> Response:
        return _json(book.info())

    @app.get("/v1/tasks")
    def tasks(who: str = Depends(client)) -> Response:
        return _json({"tasks": [{"id": t.id, "level": t.level, "name": t.name} for t in book.tasks.values()]})

    def take(who: str, jobs: list[JobRequest]) -> list[str]:
        if len(jobs) > book.limits.max_batch:
            raise JobRefused(413, f"{len(jobs)} jobs in one batch; the bound is {book.limits.max_batch}")
        resolved = [(book.resolve_task(job.task_id, job.task), job.candidate, job.backend,
                     book.resolve_config(job.config)) for job in jobs]
        return book.submit(who, resolved)

    @app.post("/v1/jobs")
    def submit(job: JobRequest, who: str = Depends(client)) -> Response:
        try:
            return _json({"job_id": take(who, [job])[0]})
        except JobRefused as exc:
            raise refused(exc) from None

    @app.post("/v1/jobs/batch")
    def submit_batch(batch: BatchRequest, who: str = Depends(client)) -> Response:
        try:
            return _json({"job_ids": take(who, batch.jobs)})
        except JobRefused as exc:
            raise refused(exc) from None

    async def wait_for(who: str, job_ids: list[str], wait_s: float) -> list[dict]:
        """The jobs' statuses once one is no longer queued, or after `wait_s`."""
        deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
        if changes.loop is None:
            changes.bind()
        while True:
            event = changes.event
            answers = await run_in_threadpool(lambda: [book.status(who, job_id) for job_id in job_ids])
            left = deadline - time.monotonic()
            if left <= 0 or any(a["status"] != "queued" for a in answers) or event is None:
                return answers
            try:
                await asyncio.wait_for(event.wait(), timeout=left)
            except asyncio.TimeoutError:
                pass

    @app.get("/v1/jobs/{job_id}")
    async def result(job_id: str, wait_s: float = 0.0, who: str = Depends(client)) -> Response:
        return _json((await wait_for(who, [job_id], wait_s))[0])

    @app.post("/v1/results")
    async def results(request: ResultsRequest, who: str = Depends(client)) -> Response:
        if len(request.job_ids) > book.limits.max_queued_per_client + book.limits.max_batch:
            raise HTTPException(413, f"{len(request.job_ids)} job ids in one request; ask about fewer")
        return _json({"jobs": await wait_for(who, request.job_ids, request.wait_s)})

    @app.get("/v1/lost")
    def lost(who: str = Depends(client)) -> Response:
        return _json({"jobs": book.lost_jobs(who)})

    @app.get("/v1/metrics")
    def metrics(who: str = Depends(client)) -> Response:
        return _json(book.metrics())

    @app.post("/v1/baselines")
    def baselines(request: BaselinesRequest, who: str = Depends(client)) -> Response:
        try:
            task = book.resolve_task(request.task_id, request.task)
            config = book.resolve_config(request.config)
        except JobRefused as exc:
            raise refused(exc) from None
        try:
            answer = book.evaluator.baselines(task, backend=request.backend, config=config)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        return _json({key: (dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value)
                      for key, value in answer.items()})

    return BodyLimit(app, max_body_bytes)
