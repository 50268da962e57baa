"""`RayEvaluator`: the `Evaluator` interface over many GPUs and nodes, on Ray (extra `ray`).

One Ray actor per GPU (or per CPU slot on the cpu backend) owns a local `Evaluator`: its worker
pool, its sandbox, its device slot (the actor side: ray_actors.py). The driver (the process that made the RayEvaluator) keeps the
queue, picks an actor for each candidate and turns what comes back into `EvalResult`s:

- Builds share the content-hash cache: every actor on a host uses the same `cache_dir`.
- Baselines are measured once per key (task, sizes, device kind, torch, timing settings) for the
  whole cluster: a small store actor hands the first actor that needs a key the job of measuring it
  and every other actor the measured entry (the key names the device, so kinds never mix).
- A task goes back to the actor that judged it before when that actor is about as free as the
  least loaded one (`AFFINITY_SLACK`); a new task goes to the actor with the fewest.
- Backpressure: each actor holds at most `jobs_per_actor` candidates; beyond that, up to
  `max_pending` wait in the driver, and `submit()` blocks while that queue is full.
- Faults: an actor that dies (process killed, node lost) is replaced, and each candidate it had in
  flight runs once more, alone on an actor, so a candidate that kills actors cannot take innocent
  ones down with it. A candidate in flight when two actors died gets RUNTIME_ERROR. Every submitted
  candidate gets a verdict (or, after `close()`, a cancelled future if it had not started).

Tasks, candidates and configs travel as pickled dataclasses (a task is its source text and a few
fields); results come back as `EvalResult.to_dict()`. docs/scaling.md: what a cluster needs.
"""
from __future__ import annotations

import collections
import itertools
import os
import queue
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from .config import EvalConfig
from .ray_actors import BaselineStore, EvaluatorActor, actor_failures, import_ray
from .result import ErrorCode, EvalResult

AFFINITY_SLACK = 1  # a task's home actor is used while it has at most this many more jobs than the least loaded
CPU_SLOT_CPUS = 4  # the cpu backend's default actor: 4 cores (builds and the timed worker share them)
ACTOR_START_TIMEOUT_S = 600.0  # an actor not ready by then (no free GPU, a stuck node) is given up and retried
ACTOR_START_ATTEMPTS = 3  # a slot whose actor failed to start this many times in a row is retired


@dataclass
class _Job:
    id: int
    task: Task
    candidate: Any
    backend: str
    config: EvalConfig
    future: Future
    holds_room: bool  # took a place in the bounded queue (given back when dispatched)
    deaths: int = 0  # actors that died while this job was on them
    started: bool = False  # sent to an actor at least once (its future is running)


@dataclass
class _Slot:
    """A place for one actor; its actor is replaced when it dies."""

    index: int
    handle: Any = None
    generation: int = 0
    ready: bool = False
    started_at: float = 0.0
    start_failures: int = 0
    retired: bool = False
    isolated: bool = False  # running a job that was in flight when an actor died: nothing else goes here
    info: dict[str, Any] = field(default_factory=dict)
    in_flight: dict[int, _Job] = field(default_factory=dict)
    jobs_done: int = 0

    @property
    def owner(self) -> str:
        return f"slot{self.index}-gen{self.generation}"


class RayEvaluator:
    """Judges candidates on a pool of Ray actors, each owning a local `Evaluator`. Follows
    `EvaluatorInterface` (interface.py): `evaluate`, `submit` (a `concurrent.futures.Future[EvalResult]`),
    `baselines`, `prewarm`, `wait_until_warm`, `close` (or use it as a context manager), and the
    attributes `backend`, `config`, `device_name`, `torch_version`; as `Evaluator` also `held_timing`,
    `platform`, `cache_dir`; and `stats()`, `actors`.

    backend: "auto" (cuda when the cluster has GPUs, else cpu), "cuda" or "cpu".
    num_actors: default one per GPU of the cluster (cuda) or one per `CPU_SLOT_CPUS` cores (cpu).
    address: None connects to the cluster Ray finds (RAY_ADDRESS, a local `ray start`) or starts a
        local one; else a Ray address ("host:6379", "ray://host:10001"). An already initialized Ray
        is used as it is.
    cpus_per_actor: the CPUs each actor reserves (default: the cluster's CPUs shared evenly); its
        local Evaluator runs `build_workers` (default half of them) concurrent builds, and on the cpu
        backend times candidates with `config.cpu_threads` (default: all of them).
    cache_dir: the cache every actor uses (builds, baselines; default: each node's
        $CUDA_GYM_CACHE or ~/.cache/cuda_gym). On one host every actor shares it.
    jobs_per_actor: candidates in flight per actor (default build_workers + 2: builds overlap the
        device); max_pending: candidates waiting in the driver before `submit()` blocks (default
        twice what the actors hold).
    Results carry the device of the actor that judged them; `device_name` is the first actor's.
    """

    def __init__(self, backend: str = "auto", num_actors: int | None = None, address: str | None = None,
                 config: EvalConfig | None = None, *, cache_dir: str | Path | None = None,
                 cpus_per_actor: int | None = None, build_workers: int | None = None,
                 jobs_per_actor: int | None = None, max_pending: int | None = None):
        if backend not in ("auto", "cuda", "cpu"):
            raise ValueError(f"backend must be 'auto', 'cuda' or 'cpu', got {backend!r}")
        ray = import_ray()
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            ray.init(address=address, include_dashboard=False, ignore_reinit_error=True)
        try:
            self._setup(ray, backend, num_actors, config, cache_dir, cpus_per_actor, build_workers,
                        jobs_per_actor, max_pending)
        except BaseException:
            self._shutdown_actors()
            if self._owns_ray:
                ray.shutdown()
            raise

    def _setup(self, ray, backend, num_actors, config, cache_dir, cpus_per_actor, build_workers,
               jobs_per_actor, max_pending) -> None:
        resources = ray.cluster_resources()
        gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        self.backend = ("cuda" if gpus else "cpu") if backend == "auto" else backend
        if self.backend == "cuda" and not gpus:
            raise RuntimeError("backend='cuda' was requested but the Ray cluster has no GPU resources; "
                               "use backend='cpu', or start Ray on GPU nodes (ray.init(num_gpus=...))")
        if num_actors is None:
            num_actors = gpus if self.backend == "cuda" else max(1, cpus // CPU_SLOT_CPUS)
        if num_actors < 1:
            raise ValueError(f"num_actors must be at least 1, got {num_actors}")
        if self.backend == "cuda" and num_actors > gpus:
            raise ValueError(f"num_actors={num_actors} GPU actors need {num_actors} GPUs; the Ray cluster has {gpus}")
        self.cpus_per_actor = cpus_per_actor or max(1, cpus // num_actors)
        if self.cpus_per_actor * num_actors > cpus:
            raise ValueError(f"{num_actors} actors x {self.cpus_per_actor} CPUs need {self.cpus_per_actor * num_actors} "
                             f"CPUs; the Ray cluster has {cpus}: lower num_actors or cpus_per_actor")
        base = config or EvalConfig()
        if self.backend == "cpu" and base.cpu_threads is None:
            base = base.replace(cpu_threads=self.cpus_per_actor)  # the slot's cores, not the whole host's
        self.config = base
        self.build_workers = build_workers or max(1, self.cpus_per_actor // 2)
        self.jobs_per_actor = jobs_per_actor or self.build_workers + 2
        self.max_pending = max_pending or 2 * num_actors * self.jobs_per_actor
        self._cache_dir = str(cache_dir) if cache_dir else None
        # The driver's thread count for GPU workers (unset: torch's default, as a local Evaluator has);
        # on the cpu backend the slot's cores.
        self._omp_threads = (str(self.config.cpu_threads) if self.backend == "cpu"
                             else os.environ.get("OMP_NUM_THREADS"))
        lease_s = (self.config.baseline_timeout_s * self.config.baseline_workers * 2 + 120.0)
        self._store = ray.remote(BaselineStore).options(num_cpus=0).remote(lease_s)
        self._actor_class = ray.remote(EvaluatorActor)
        self._failures = actor_failures()
        self._slots = [_Slot(index) for index in range(num_actors)]
        self._pending: collections.deque[_Job] = collections.deque()
        self._events: queue.Queue = queue.Queue()
        self._room = threading.Semaphore(self.max_pending)
        self._lock = threading.Lock()  # guards what stats() reads; the dispatcher thread owns the rest
        self._home: dict[str, int] = {}
        self._outstanding: set[int] = set()  # jobs sent to an actor whose answer has not come back
        self._ids = itertools.count()
        self._counts = collections.Counter()
        self._dispatches: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self._closed = False
        self._last_actor_error = ""
        for slot in self._slots:
            self._start_actor(slot)
        self._wait_for_actors()
        first = self._slots[0].info
        self.platform = first["platform"]
        self.device_name = first["device_name"]
        self.torch_version = first["torch_version"]
        self.held_timing = first["held_timing"]
        self.cache_dir = Path(first["cache_dir"])
        self._dispatcher = threading.Thread(target=self._run, name="cuda-gym-ray-dispatch", daemon=True)
        self._dispatcher.start()

    # ----------------------------------------------------------------------------------- public
    def evaluate(self, task: Task, candidate: Any, *, backend: str | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        """Judge `candidate` (source text or `Candidate`) on `task`; never raises for bad candidates."""
        return self.submit(task, candidate, backend=backend, config=config).result()

    def submit(self, task: Task, candidate: Any, *, backend: str | None = None,
               config: EvalConfig | None = None) -> Future:
        """Like `evaluate`, but returns a `concurrent.futures.Future[EvalResult]`. Blocks while
        `max_pending` candidates wait for an actor (backpressure)."""
        backend = self._check_backend(backend)
        # A done-callback runs on the dispatcher thread: it must not wait for room only that thread makes.
        holds_room = False
        if threading.current_thread() is not self._dispatcher:
            while not self._closed and not holds_room:
                holds_room = self._room.acquire(timeout=0.5)
        if self._closed:
            if holds_room:
                self._room.release()
            raise RuntimeError("this RayEvaluator is closed")
        future: Future = Future()
        job = _Job(next(self._ids), task, candidate, backend, config or self.config, future, holds_room)
        self._events.put(("submit", job))
        return future

    def baselines(self, task: Task, *, backend: str | None = None, config: EvalConfig | None = None) -> dict[str, Any]:
        """Cached eager / torch.compile times for a task (as `Evaluator.baselines`), measured on the
        task's home actor (or the least loaded one); tried on a second actor if the first dies."""
        ray = import_ray()
        backend = self._check_backend(backend)
        error = None
        for _ in range(2):
            slot = self._pick_for_call(task.id)
            generation = slot.generation
            try:
                return ray.get(slot.handle.baselines.remote(task, backend, config or self.config))
            except self._failures as exc:
                error = exc
                self._events.put(("dead", slot, generation, f"{type(exc).__name__}: {exc}"))
        raise RuntimeError(f"the baselines of {task.id} could not be measured: two actors died ({error})")

    def prewarm(self, tasks: list[Task], *, backend: str | None = None, config: EvalConfig | None = None,
                parallel: int | None = None) -> dict[str, str]:
        """Does nothing and returns {}: `Evaluator.prewarm` fills one machine's inductor cache, and a
        task's baselines may be measured on any actor's node, which then compiles them itself."""
        return {}

    def wait_until_warm(self) -> None:
        """Every ready actor's `Evaluator.wait_until_warm()`."""
        ray = import_ray()
        calls = [slot.handle.wait_until_warm.remote() for slot in self._slots if slot.ready and not slot.retired]
        ray.wait(calls, num_returns=len(calls))

    @property
    def actors(self) -> list[Any]:
        """The current actor handles, by slot (for monitoring and fault drills; do not call them)."""
        return [slot.handle for slot in self._slots]

    def stats(self) -> dict[str, Any]:
        """Counters of this evaluator: submitted, judged, reruns, actor deaths, replacements,
        verdicts decided by deaths, the deepest the queue got; per slot its actor (generation,
        ready, jobs done, task ids in flight); per task the slots it was dispatched to; and the
        baseline store's keys, entries served and measured."""
        ray = import_ray()
        with self._lock:
            out = dict(self._counts) | {
                "pending": len(self._pending),
                "slots": [{"index": s.index, "generation": s.generation, "ready": s.ready, "retired": s.retired,
                           "isolated": s.isolated, "jobs_done": s.jobs_done, "pid": s.info.get("pid"),
                           "in_flight": sorted(job.task.id for job in s.in_flight.values())} for s in self._slots],
                "dispatches": {task_id: dict(counter) for task_id, counter in self._dispatches.items()},
            }
        try:
            out["baselines"] = ray.get(self._store.stats.remote(), timeout=30)
        except ray.exceptions.RayError as exc:
            out["baselines"] = {"error": str(exc)}
        return out

    def close(self) -> None:
        """Cancel candidates that have not reached an actor, wait for the verdicts of those in flight,
        stop the actors (and Ray, if this evaluator started it)."""
        if self._closed:
            return
        self._closed = True
        self._events.put(("close",))
        self._dispatcher.join()
        self._shutdown_actors()
        if self._owns_ray:
            import_ray().shutdown()

    def __deepcopy__(self, memo: dict) -> "RayEvaluator":
        return self  # shared by design (gymnasium deep-copies spec kwargs)

    def __enter__(self) -> "RayEvaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------------------------- actors
    def _check_backend(self, backend: str | None) -> str:
        backend = backend or self.backend
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
        if backend != self.backend:
            raise ValueError(f"this RayEvaluator's actors run backend {self.backend!r}; make another for {backend!r}")
        return backend

    def _start_actor(self, slot: _Slot) -> None:
        slot.generation += 1
        slot.ready = False
        slot.isolated = False
        slot.info = {}
        slot.started_at = time.monotonic()
        slot.handle = self._actor_class.options(
            num_cpus=self.cpus_per_actor, num_gpus=1 if self.backend == "cuda" else 0,
            max_concurrency=self.jobs_per_actor + 4, max_restarts=0, max_task_retries=0,
        ).remote(self.backend, self.config, self._cache_dir, self.build_workers, self._store, slot.owner,
                 self._omp_threads, os.getpriority(os.PRIO_PROCESS, 0))
        generation = slot.generation
        ref = slot.handle.info.remote()
        ref.future().add_done_callback(lambda done: self._events.put(("ready", slot, generation, done)))

    def _wait_for_actors(self) -> None:
        """At construction: every actor started, or an error that says why not."""
        deadline = time.monotonic() + ACTOR_START_TIMEOUT_S
        while not all(slot.ready for slot in self._slots):
            try:
                event = self._events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                waiting = [slot.index for slot in self._slots if not slot.ready]
                raise RuntimeError(f"Ray actors {waiting} did not start within {ACTOR_START_TIMEOUT_S:g} s: the "
                                   f"cluster may lack the resources ({self.cpus_per_actor} CPUs"
                                   f"{', 1 GPU' if self.backend == 'cuda' else ''} per actor); ray.available_resources() "
                                   "shows what is free") from None
            _, slot, generation, done = event
            try:
                info = done.result()
            except Exception as exc:  # noqa: BLE001 - reported with the actor's own message
                raise RuntimeError(f"an evaluator actor failed to start: {_describe(exc)}") from None
            if generation == slot.generation:
                slot.info, slot.ready = info, True

    def _shutdown_actors(self) -> None:
        ray = import_ray()
        slots = getattr(self, "_slots", [])
        closing = []
        for slot in slots:
            if slot.handle is not None and slot.ready:
                try:
                    closing.append(slot.handle.close.remote())
                except Exception:  # noqa: BLE001 - a dead actor needs no close
                    pass
        if closing:
            ray.wait(closing, num_returns=len(closing), timeout=60)
        for handle in [slot.handle for slot in slots if slot.handle is not None] + [getattr(self, "_store", None)]:
            if handle is not None:
                try:
                    ray.kill(handle)
                except Exception:  # noqa: BLE001 - already gone
                    pass

    def _pick_for_call(self, task_id: str) -> _Slot:
        with self._lock:
            ready = [s for s in self._slots if s.ready and not s.retired]
            if not ready:
                raise RuntimeError("no evaluator actor is running: " + (self._last_actor_error or "all were retired"))
            home = self._home.get(task_id)
            for slot in ready:
                if slot.index == home:
                    return slot
            homes = collections.Counter(self._home.values())
            slot = min(ready, key=lambda s: (len(s.in_flight), homes[s.index], s.index))
            self._home[task_id] = slot.index  # its candidates follow the baselines (spreads a suite's baselines)
            return slot

    # ------------------------------------------------------------------------------ dispatcher
    def _run(self) -> None:
        """The dispatcher thread: owns the queue and the slots; every change arrives as an event."""
        closing = False
        while True:
            try:
                event = self._events.get(timeout=1.0)
            except queue.Empty:
                event = None
            with self._lock:
                if event is not None:
                    kind = event[0]
                    if kind == "submit":
                        self._pending.append(event[1])
                        self._counts["submitted"] += 1
                        self._counts["max_pending_seen"] = max(self._counts["max_pending_seen"], len(self._pending))
                    elif kind == "done":
                        self._on_done(*event[1:])
                    elif kind == "ready":
                        self._on_ready(*event[1:])
                    elif kind == "dead":
                        slot, generation, reason = event[1:]
                        if generation == slot.generation:
                            self._replace(slot, reason)
                    elif kind == "close":
                        closing = True
                self._check_starts()
                if closing:  # as Evaluator.close: cancel what has not started, finish what has
                    for job in [job for job in self._pending if not job.started]:
                        self._give_room(job)
                        job.future.cancel()
                    self._pending = collections.deque(job for job in self._pending if job.started)
                self._dispatch()
                if not any(s.ready or s.handle is not None for s in self._slots if not s.retired):
                    self._fail_pending("no evaluator actor could be started: " + self._last_actor_error)
                busy = self._pending or self._outstanding
            if closing and not busy:
                return

    def _dispatch(self) -> None:
        """Send waiting jobs to actors with room: reruns alone on an idle actor, the rest by affinity.
        A rerun that finds no idle actor reserves the least loaded one, which then takes nothing new
        until it has drained (else a steady stream would keep every actor busy forever)."""
        remaining: collections.deque[_Job] = collections.deque()
        reserved: set[int] = set()
        while self._pending:
            job = self._pending.popleft()
            slot = self._choose(job, reserved)
            if slot is None:
                remaining.append(job)
                if not job.deaths:
                    break  # no room anywhere for a regular job: keep the order
                draining = [s for s in self._open_slots(reserved, room=False)]
                if draining:
                    reserved.add(min(draining, key=lambda s: (len(s.in_flight), s.index)).index)
                continue
            self._send(slot, job)
        remaining.extend(self._pending)
        self._pending = remaining

    def _open_slots(self, reserved: set[int], *, room: bool = True) -> list[_Slot]:
        return [s for s in self._slots if s.ready and not s.retired and not s.isolated and s.index not in reserved
                and (not room or len(s.in_flight) < self.jobs_per_actor)]

    def _choose(self, job: _Job, reserved: set[int]) -> _Slot | None:
        if job.deaths:  # it was on an actor that died: run it alone, so a second death is its own
            idle = [s for s in self._slots if s.ready and not s.retired and not s.isolated and not s.in_flight]
            return min(idle, key=lambda s: s.index) if idle else None
        open_slots = self._open_slots(reserved)
        if not open_slots:
            return None
        least = min(len(s.in_flight) for s in open_slots)
        home = self._home.get(job.task.id)
        for slot in open_slots:
            if slot.index == home and len(slot.in_flight) <= least + AFFINITY_SLACK:
                return slot
        homes = collections.Counter(self._home.values())
        return min(open_slots, key=lambda s: (len(s.in_flight), homes[s.index], s.index))

    def _send(self, slot: _Slot, job: _Job) -> None:
        self._give_room(job)
        if not job.started:
            if not job.future.set_running_or_notify_cancel():
                return  # the caller cancelled it while it waited
            job.started = True
        self._home.setdefault(job.task.id, slot.index)
        self._dispatches[job.task.id][slot.index] += 1
        if job.deaths:
            slot.isolated = True
            self._counts["reruns"] += 1
        slot.in_flight[job.id] = job
        self._outstanding.add(job.id)
        generation = slot.generation
        ref = slot.handle.evaluate.remote(job.task, job.candidate, job.backend, job.config)
        ref.future().add_done_callback(lambda done: self._events.put(("done", slot, generation, job, done)))

    def _give_room(self, job: _Job) -> None:
        if job.holds_room:
            job.holds_room = False
            self._room.release()

    def _on_ready(self, slot: _Slot, generation: int, done: Future) -> None:
        if generation != slot.generation:
            return
        try:
            slot.info = done.result()
        except Exception as exc:  # noqa: BLE001 - the actor's constructor failed
            slot.start_failures += 1
            self._last_actor_error = _describe(exc)
            self._counts["actor_start_failures"] += 1
            if slot.start_failures >= ACTOR_START_ATTEMPTS:
                self._retire(slot)
            else:
                self._start_actor(slot)
            return
        slot.ready = True
        slot.start_failures = 0

    def _check_starts(self) -> None:
        for slot in self._slots:
            if not slot.retired and not slot.ready and time.monotonic() - slot.started_at > ACTOR_START_TIMEOUT_S:
                self._last_actor_error = f"an actor did not start within {ACTOR_START_TIMEOUT_S:g} s"
                self._kill(slot)
                slot.start_failures += 1
                if slot.start_failures >= ACTOR_START_ATTEMPTS:
                    self._retire(slot)
                else:
                    self._start_actor(slot)

    def _on_done(self, slot: _Slot, generation: int, job: _Job, done: Future) -> None:
        self._outstanding.discard(job.id)
        if slot.generation == generation:
            slot.in_flight.pop(job.id, None)
            if not slot.in_flight:
                slot.isolated = False
        try:
            result = EvalResult.from_dict(done.result())
        except self._failures as exc:
            self._on_actor_death(slot, generation, job, exc)
            return
        except Exception as exc:  # noqa: BLE001 - a failure in the actor's code is still a verdict
            result = self._verdict(job, ErrorCode.INTERNAL_ERROR, f"evaluator actor error: {_describe(exc)}",
                                   traceback.format_exc(limit=6))
        if slot.generation == generation:
            slot.jobs_done += 1
        self._resolve(job, result)

    def _on_actor_death(self, slot: _Slot, generation: int, job: _Job, exc: BaseException) -> None:
        reason = _describe(exc)
        if generation == slot.generation:
            self._replace(slot, reason)
        job.deaths += 1
        if job.deaths >= 2:
            self._counts["verdicts_by_deaths"] += 1
            self._resolve(job, self._verdict(
                job, ErrorCode.RUNTIME_ERROR,
                "two evaluator actors died while this candidate was on them (the second time it ran alone), "
                f"so the candidate is taken to have killed them; last: {reason}"))
        else:
            self._pending.appendleft(job)  # runs once more, alone

    def _replace(self, slot: _Slot, reason: str) -> None:
        """The slot's actor died (or is unreachable): count it, free its claims, start a new one.
        Jobs still in flight on it come back as failures and are handled one by one."""
        self._counts["actor_deaths"] += 1
        self._last_actor_error = reason
        self._store.forget.remote(slot.owner)
        self._kill(slot)
        slot.in_flight = {}  # their answers (failures, or verdicts that made it out) still arrive
        self._counts["replacements"] += 1
        self._start_actor(slot)

    def _kill(self, slot: _Slot) -> None:
        try:
            import_ray().kill(slot.handle)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def _retire(self, slot: _Slot) -> None:
        self._kill(slot)
        slot.retired, slot.ready, slot.handle = True, False, None

    def _fail_pending(self, message: str) -> None:
        while self._pending:
            job = self._pending.popleft()
            self._give_room(job)
            if job.started or job.future.set_running_or_notify_cancel():
                self._resolve(job, self._verdict(job, ErrorCode.INTERNAL_ERROR, message))

    def _resolve(self, job: _Job, result: EvalResult) -> None:
        self._counts["judged"] += 1
        job.future.set_result(result)

    def _verdict(self, job: _Job, code: ErrorCode, message: str, log: str = "") -> EvalResult:
        return EvalResult(task_id=job.task.id, backend=job.backend, error_code=code, message=message,
                          device=self.device_name if job.backend == "cuda" else "cpu",
                          torch_version=self.torch_version, precision=job.config.precision,
                          policy=job.config.policy, runtime_log=log[-job.config.max_log_chars:])


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:600]
