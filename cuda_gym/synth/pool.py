"""Worker processes that run the execution checks, robust to tasks that crash or hang.

`CheckPool(backend, workers).run(jobs, timeout_s)` hands jobs to long-lived worker processes
(`worker.py`, each one imports torch once) and returns one result per job, in job order. A job
past its timeout gets its worker killed with its whole process group (stage "timeout"); a worker
that dies mid-job (a segfault, the OOM killer) gives the job stage "crash" with its log's tail. A
fresh worker replaces either. The caller's process never imports CUDA state.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from tqdm import tqdm

STARTUP_TIMEOUT_S = 300.0
MAX_STARTUP_FAILURES = 3
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class WorkerStartError(RuntimeError):
    """Workers could not start (the message has the worker log's tail)."""


class _Worker:
    def __init__(self, settings: dict[str, Any], log_dir: Path, number: int):
        self.log_path = log_dir / f"worker{number}.log"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # many workers compile at once already
        if settings.get("threads"):
            env["OMP_NUM_THREADS"] = str(settings["threads"])
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cuda_gym.synth.worker", json.dumps(settings)], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True, env=env)
        os.set_blocking(self.process.stdout.fileno(), False)
        self.buffer = b""
        self.ready = False
        self.device = ""
        self.job: int | None = None
        self.deadline = time.monotonic() + STARTUP_TIMEOUT_S

    def send(self, index: int, job: dict[str, Any], timeout_s: float) -> None:
        self.job = index
        self.deadline = time.monotonic() + timeout_s
        self.process.stdin.write((json.dumps(job) + "\n").encode())
        self.process.stdin.flush()

    def read(self) -> list[dict[str, Any]] | None:
        """Complete messages now available; None at end of file (the worker exited)."""
        try:
            data = os.read(self.process.stdout.fileno(), 1 << 20)
        except BlockingIOError:
            return []
        if not data:
            return None
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def log_tail(self, limit: int = 800) -> str:
        try:
            text = self.log_path.read_bytes()[-limit:].decode("utf-8", errors="replace")
        except OSError:
            return ""
        return text.strip()

    def exit_description(self) -> str:
        code = self.process.poll()
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class CheckPool:
    """`workers` worker processes for one backend. Use as a context manager (or call `close()`).

    threads: torch threads per worker (CPU). timing_lock: workers take this file lock while timing,
    so timed forwards never overlap (default: a lock file in the pool's scratch directory).
    """

    def __init__(self, backend: str, workers: int, threads: int | None = None, exclusive_timing: bool = True):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.backend = backend
        self.workers_wanted = workers
        self.scratch = Path(tempfile.mkdtemp(prefix="cuda_gym_synth_"))
        self.timing_lock = str(self.scratch / "timing.lock") if exclusive_timing else None
        self.settings = {"backend": backend, "threads": threads}
        self._workers: list[_Worker] = []
        self._started = 0
        self._startup_failures = 0
        self.device = ""
        self.restarts = 0

    def __enter__(self) -> "CheckPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> _Worker:
        self._started += 1
        worker = _Worker(self.settings, self.scratch, self._started)
        self._workers.append(worker)
        return worker

    def _replace(self, worker: _Worker, selector: selectors.BaseSelector) -> None:
        try:
            selector.unregister(worker.process.stdout)
        except (KeyError, ValueError):
            pass
        worker.kill()
        self._workers.remove(worker)
        self.restarts += 1
        selector.register(self._start().process.stdout, selectors.EVENT_READ)

    def run(self, jobs: list[dict[str, Any]], timeout_s: float, desc: str = "checking",
            progress: bool = True) -> list[dict[str, Any]]:
        """One result per job, in order. Raises WorkerStartError if workers keep failing to start."""
        results: list[dict[str, Any] | None] = [None] * len(jobs)
        if not jobs:
            return []
        for job in jobs:
            job.setdefault("timing_lock", self.timing_lock)
        while len(self._workers) < self.workers_wanted:
            self._start()
        queue = deque(range(len(jobs)))
        selector = selectors.DefaultSelector()
        for worker in self._workers:
            selector.register(worker.process.stdout, selectors.EVENT_READ)
        by_stream = lambda stream: next(w for w in self._workers if w.process.stdout is stream)  # noqa: E731
        passed = 0
        bar = tqdm(total=len(jobs), desc=desc, unit="task", disable=not progress, dynamic_ncols=True)
        try:
            while any(r is None for r in results):
                for worker in self._workers:
                    if worker.ready and worker.job is None and queue:
                        index = queue.popleft()
                        worker.send(index, jobs[index], timeout_s)
                now = time.monotonic()
                wait = max(0.05, min([w.deadline - now for w in self._workers] + [5.0]))
                for key, _ in selector.select(wait):
                    worker = by_stream(key.fileobj)
                    messages = worker.read()
                    if messages is None:
                        self._on_exit(worker, results, queue)
                        self._replace(worker, selector)
                        continue
                    for message in messages:
                        if not worker.ready:
                            self._on_ready(worker, message)
                            continue
                        if worker.job is not None:
                            results[worker.job] = message
                            passed += bool(message.get("ok"))
                            worker.job = None
                now = time.monotonic()
                for worker in list(self._workers):
                    if worker.deadline > now:
                        continue
                    if worker.job is not None:
                        results[worker.job] = {"ok": False, "stage": "timeout", "message":
                                               f"no answer within {timeout_s:g} s; the worker was killed"}
                        worker.job = None
                        self._replace(worker, selector)
                    elif not worker.ready:
                        self._startup_failed(worker, f"not ready within {STARTUP_TIMEOUT_S:g} s")
                        self._replace(worker, selector)
                done = sum(r is not None for r in results)
                if done != bar.n:
                    bar.update(done - bar.n)
                    bar.set_postfix(passed=passed, refresh=False)
        finally:
            bar.close()
            selector.close()
        return [r for r in results if r is not None]

    def _on_ready(self, worker: _Worker, message: dict[str, Any]) -> None:
        if not message.get("ready"):
            raise WorkerStartError(f"a {self.backend} worker could not start: {message.get('message')}")
        worker.ready = True
        worker.device = self.device = str(message.get("device", ""))
        worker.deadline = float("inf")
        self._startup_failures = 0

    def _on_exit(self, worker: _Worker, results: list, queue: deque) -> None:
        worker.process.wait(timeout=30)
        if worker.job is not None:
            results[worker.job] = {"ok": False, "stage": "crash", "message":
                                   f"the worker {worker.exit_description()} while checking this task; "
                                   f"log tail: {worker.log_tail()[-400:]}"}
            worker.job = None
        elif not worker.ready:
            self._startup_failed(worker, worker.exit_description())

    def _startup_failed(self, worker: _Worker, why: str) -> None:
        self._startup_failures += 1
        if self._startup_failures >= MAX_STARTUP_FAILURES:
            raise WorkerStartError(f"{self._startup_failures} {self.backend} workers in a row failed to start "
                                   f"({why}); last log:\n{worker.log_tail(2000)}")

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []
        for path in self.scratch.glob("*"):
            try:
                path.unlink()
            except OSError:
                pass
        try:
            self.scratch.rmdir()
        except OSError:
            pass
