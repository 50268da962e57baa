"""Worker processes: started from a fork server with torch imported, killed with their group.

`WorkerPool` keeps warm spares per (backend, role) so that a job need not wait for a process to
start, import torch or create a CUDA context. A spare warms up only while the device is idle: the
evaluator starts replacements (`replenish`) after a job on the device has finished, and `settle`
waits for every warming spare before the next job uses the device, so no spare's context creation
or warm-up kernels share the device with timed kernels. Where a role keeps several spares, they are
started together once the last is taken, so several jobs in a row find one ready and wait for no
start at all (on a many-core host, several start in about the time of one).

A spec with `defer_device` makes spares that prepare on the CPU only (start, sandbox, the
tripwire's code walk) and ready the device when their job arrives: they never touch the device
as spares, so `replenish` keeps them topped up while another job holds the device and `settle`
does not wait for them. Every worker runs
exactly one job and exits, so nothing a candidate did to its process (patched functions, CUDA
errors, leaked memory) can reach the next candidate.
"""
from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .protocol import Message, ProtocolError, decode

MAX_MESSAGE_BYTES = 4 * 2**30
READY_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 60.0  # a spare not ready by then is replaced

_context_lock = threading.Lock()
_context: Any = None
_starting = threading.local()


def _install_main_module_guard() -> None:
    """Workers run an importable function and must not re-execute the caller's __main__ script
    (multiprocessing would, and a script without an `if __name__ == "__main__"` guard then
    recurses). Strip the main-module fields for processes this module starts, and only those."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data
    if getattr(original, "_cuda_gym_guard", False):
        return

    def get_preparation_data(name: str) -> dict:
        data = original(name)
        if getattr(_starting, "active", False):
            data.pop("init_main_from_path", None)
            data.pop("init_main_from_name", None)
        return data

    get_preparation_data._cuda_gym_guard = True  # type: ignore[attr-defined]
    spawn.get_preparation_data = get_preparation_data


def _allow_worker_processes() -> None:
    """Let an env that runs inside a daemonic process (AsyncVectorEnv's default) start the
    evaluator's workers. multiprocessing refuses children to daemonic processes so that they are
    not orphaned; the evaluator's workers are daemonic themselves, run one job each and are killed
    by `close()`, so this process stops counting as daemonic *for itself only* (its parent still
    treats it as a daemon and terminates it at exit)."""
    import multiprocessing
    from multiprocessing import forkserver

    process = multiprocessing.current_process()
    if process.daemon:
        try:
            process.daemon = False
        except AssertionError:  # pragma: no cover - a started Process object seen from its parent
            process._config["daemon"] = False  # type: ignore[attr-defined]
    # A process fork()ed from one whose evaluator already runs a fork server (AsyncVectorEnv's
    # default "fork" context) inherits that server's bookkeeping; multiprocessing then fails with
    # ChildProcessError when it checks on a server that is not its child. Forget the inherited
    # server (closing only our copy of its pipe) so that this process starts its own.
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is not None:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            with server._lock:
                try:
                    os.close(server._forkserver_alive_fd)
                except (OSError, TypeError):
                    pass
                server._forkserver_address = None
                server._forkserver_alive_fd = None
                server._forkserver_pid = None


def _mp_context() -> Any:
    """The fork-server context; the server imports torch, the worker code and torch.compile's
    compiler once (preload.py), CUDA never."""
    global _context
    _allow_worker_processes()
    with _context_lock:
        if _context is None:
            # Ask torch to count devices through NVML: a CUDA-runtime device count in the fork
            # server (some torch modules query it at import) would poison every forked worker.
            os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["cuda_gym.eval.worker", "cuda_gym.eval.preload"])
            _install_main_module_guard()
            _context = ctx
        return _context


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, message: str, exitcode: int | None):
        super().__init__(message)
        self.exitcode = exitcode


@dataclass
class WorkerSpec:
    role: str  # "probe", "build", "eval" or "baseline"
    backend: str
    root: Path  # where scratch directories are made
    isolate_network: bool = True
    max_file_mb: float = 64.0
    address_space_gb: float | None = None
    cpu_threads: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    yield_cpu: bool = False  # run on idle CPU time only (sandbox.yield_cpu), compilers included
    defer_device: bool = False  # ready the device when the job arrives, not as a spare (see the module doc)


def _describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


OWNER_FILE = ".owner"  # in a worker's scratch directory: flocked by the process that made the worker


def _hold_owner(scratch: Path) -> int | None:
    """The owner's flock on `<scratch>/.owner`, held while the worker lives; the kernel drops it when
    the owner dies, however it dies, in any pid namespace. None where it cannot be taken."""
    try:
        fd = os.open(scratch / OWNER_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except OSError:
        os.close(fd)
        return None


def remove_orphaned_scratch(root: str | Path, min_age_s: float = 60.0) -> int:
    """Remove the worker scratch directories under `root` whose owner is gone (an evaluator or Ray
    actor killed before it could reap its workers; each can hold a worker's compiler caches and
    temporaries, up to gigabytes): their `.owner` flock is free. Returns how many. Directories
    younger than `min_age_s` (an owner between making the file and locking it) or without the file
    are left alone."""
    removed = 0
    for path in Path(root).glob("cg-*"):
        owner = path / OWNER_FILE
        try:
            if time.time() - owner.stat().st_mtime < min_age_s:
                continue
            fd = os.open(owner, os.O_RDWR)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner lives
        else:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


class Worker:
    """One worker process and the pipe it reports on."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.scratch = Path(tempfile.mkdtemp(prefix=f"cg-{spec.role}-", dir=spec.root))
        self._owner_fd = _hold_owner(self.scratch)
        self.log_path = self.scratch / "worker.log"
        ctx = _mp_context()
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        setup = {
            "role": spec.role, "backend": spec.backend, "log_path": str(self.log_path),
            "scratch_dir": str(self.scratch), "env": spec.env, "isolate_network": spec.isolate_network,
            "max_file_mb": spec.max_file_mb, "address_space_gb": spec.address_space_gb,
            "cpu_threads": spec.cpu_threads, "yield_cpu": spec.yield_cpu, "defer_device": spec.defer_device,
        }
        from . import worker as worker_module

        self.process = ctx.Process(target=worker_module.worker_main, args=(child_conn, setup), daemon=True)
        _starting.active = True
        try:
            self.process.start()
        finally:
            _starting.active = False
        child_conn.close()
        self.conn = parent_conn
        self.ready: dict[str, Any] | None = None
        self.started_at = time.monotonic()

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        if self.ready is None:
            message = self.receive(time.monotonic() + timeout_s)
            if message.kind != "ready":
                raise WorkerDied(f"worker sent {message.kind!r} before 'ready': {message.meta}", self.process.exitcode)
            self.ready = message.meta
        return self.ready

    def send_job(self, job: dict[str, Any]) -> None:
        self.conn.send_bytes(json.dumps(job).encode())

    def receive(self, deadline: float) -> Message:
        """The next message, or WorkerTimeout / WorkerDied."""
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0 or not self.conn.poll(remaining):
                raise WorkerTimeout()
            payload = self.conn.recv_bytes(MAX_MESSAGE_BYTES)
        except (EOFError, OSError, ConnectionError):
            self.process.join(timeout=5)
            raise WorkerDied(f"the worker {_describe_exit(self.process.exitcode)}", self.process.exitcode) from None
        try:
            return decode(payload)
        except ProtocolError as exc:
            raise WorkerDied(f"the worker sent a malformed message ({exc})", None) from None

    def messages(self, deadline: float) -> Any:
        """Yield messages until the worker's 'exit' message."""
        while True:
            message = self.receive(deadline)
            if message.kind == "exit":
                return
            yield message

    def log_tail(self, limit: int) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - limit))
                text = handle.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        return ("[...]\n" + text) if size > limit else text

    def kill(self) -> None:
        """Kill the worker and everything in its process group. The process is reaped and its
        scratch directory removed in the background (a CUDA process takes a while to exit, and
        the job's result need not wait for that); `wait_for_reaped` waits for it."""
        pid = self.process.pid
        if pid is not None:
            try:  # the worker, or, once it exited, anything it left in its group
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if self.process.exitcode is None:
                try:
                    self.process.kill()
                except (OSError, ValueError):
                    pass
        reaper = threading.Thread(target=self._reap, name="cuda_gym-reaper", daemon=True)
        reaper.start()
        with _reapers_lock:
            _reapers[:] = [thread for thread in _reapers if thread.is_alive()]
            _reapers.append(reaper)

    def _reap(self) -> None:
        # Process.close() is left to garbage collection: multiprocessing polls its children from
        # other threads (when starting a process), and closing one here could race with that.
        self.process.join(timeout=10)
        try:
            self.conn.close()
        except OSError:
            pass
        shutil.rmtree(self.scratch, ignore_errors=True)
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None


_reapers: list[threading.Thread] = []
_reapers_lock = threading.Lock()


def wait_for_reaped(timeout_s: float = 15.0) -> None:
    """Wait until every killed worker has been reaped and its scratch directory removed."""
    deadline = time.monotonic() + timeout_s
    with _reapers_lock:
        pending = list(_reapers)
    for reaper in pending:
        reaper.join(max(0.0, deadline - time.monotonic()))
    with _reapers_lock:
        _reapers[:] = [thread for thread in _reapers if thread.is_alive()]


class WorkerPool:
    """Hands out ready workers; keeps spares per spec key warming up in the background."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[tuple, list[Worker]] = {}
        self._wanted: dict[tuple, tuple[WorkerSpec, int]] = {}  # key -> (spec, spares started at once)
        self._closed = False

    @staticmethod
    def _key(spec: WorkerSpec) -> tuple:
        return (spec.role, spec.backend, spec.isolate_network, spec.max_file_mb, spec.address_space_gb,
                spec.cpu_threads, str(spec.root), tuple(sorted(spec.env.items())), spec.yield_cpu, spec.defer_device)

    def acquire(self, spec: WorkerSpec, *, spares: int = 1) -> Worker:
        """The oldest spare for `spec` (or a new worker). With `spares` > 0, `replenish()` starts
        that many together once none is left."""
        key = self._key(spec)
        with self._lock:
            stock = self._spares.get(key) or []
            worker = stock.pop(0) if stock else None
            if spares > 0 and not self._closed:
                self._wanted[key] = (spec, spares)
        if worker is None or worker.process.exitcode is not None:
            if worker is not None:
                worker.kill()
            worker = Worker(spec)
        return worker

    def replenish(self, only: WorkerSpec | None = None) -> None:
        """For every spec acquired with spares whose spares are all taken (or `only` that spec),
        start them again; a `defer_device` spec's spares are topped up to their count instead (they
        need no idle device, so `only=` such a spec may be called while a job holds the device)."""
        with self._lock:
            if self._closed:
                return
            for key, (spec, count) in self._wanted.items():
                if only is not None and key != self._key(only):
                    continue
                stock = self._spares.setdefault(key, [])
                if stock and not spec.defer_device:
                    continue
                while len(stock) < count:  # stored as each starts: a failed start leaks none
                    stock.append(Worker(spec))

    def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until no spare is still warming up. A spare that dies or is not ready in time is
        dropped (and killed); the next acquire starts a fresh worker. Call it with the device slot
        held, so no job takes a spare meanwhile."""
        wait_for_reaped()  # the last job's worker is gone (its memory freed) before the device is used again
        with self._lock:  # spares that ready the device only for their job never touch it as spares
            spares = [(key, worker) for key, stock in self._spares.items() for worker in stock
                      if not worker.spec.defer_device]
        for key, worker in spares:
            try:
                worker.wait_ready(timeout_s)
            except (WorkerDied, WorkerTimeout):
                with self._lock:
                    stock = self._spares.get(key) or []
                    if worker in stock:
                        stock.remove(worker)
                worker.kill()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            spares = [worker for stock in self._spares.values() for worker in stock]
            self._spares = {}
        for worker in spares:
            worker.kill()
        wait_for_reaped()


def run_job(worker: Worker, job: dict[str, Any], timeout_s: float,
            on_message: Callable[[Message], bool]) -> None:
    """Send `job`, feed messages to `on_message` until it returns False or the worker exits.

    Raises WorkerTimeout or WorkerDied; the caller kills the worker in every case.
    """
    deadline = time.monotonic() + timeout_s
    worker.wait_ready(max(timeout_s, READY_TIMEOUT_S))
    worker.send_job(job)
    for message in worker.messages(deadline):
        if not on_message(message):
            return
