"""The actor side of `RayEvaluator` (distributed.py): what runs inside Ray's processes.

- `EvaluatorActor`: one per GPU (or CPU slot), owning a local `Evaluator`, its worker pool and its
  device slot; the driver calls `evaluate`, `baselines`, `wait_until_warm`, `info` and `close`.
- `BaselineStore`: one per cluster, baseline entries by key and who is measuring which key.
- `ClusterBaselines`: an actor's baseline cache that asks the store first, so a key is measured by
  one actor and read by the rest.
"""
from __future__ import annotations

import collections
import os
import time
from pathlib import Path
from typing import Any

from ..tasks.task import Task
from .baselines import BaselineCache, entry_serves, merge_entries
from .config import EvalConfig

BASELINE_POLL_S = 0.5  # how often an actor waiting for another's baseline measurement asks again


def import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("RayEvaluator needs Ray: pip install 'cuda_gym[ray]' (or pip install 'ray>=2.40')") from None
    return ray


def actor_failures() -> tuple[type[BaseException], ...]:
    """Ray's errors that mean "the actor (or its node) is gone", not "the candidate failed"."""
    exceptions = import_ray().exceptions
    names = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "LocalRayletDiedError")
    return tuple(getattr(exceptions, name) for name in names if hasattr(exceptions, name))


class ClusterBaselines:
    """Stands in for an actor's `BaselineCache`: asks the cluster's store first, so a key is measured
    by one actor and read by the rest. The store is a shortcut only: when it is unreachable the
    actor measures (or reads) locally, as a plain Evaluator would."""

    def __init__(self, local: BaselineCache, store: Any, owner: str):
        self.local = local
        self.store = store
        self.owner = owner

    def get(self, key: str, compute, needed: tuple[str, ...]) -> dict[str, Any]:
        ray = import_ray()
        while True:
            try:
                state, entry = ray.get(self.store.claim.remote(key, needed, self.owner))
            except ray.exceptions.RayError:
                return self.local.get(key, compute, needed)
            if state == "entry":
                return self.local.get(key, lambda: entry, needed)
            if state == "yours":
                measured = []

                def measure() -> dict[str, Any]:
                    measured.append(True)
                    return compute()

                try:
                    entry = self.local.get(key, measure, needed)  # this node's cache may have it already
                except BaseException:
                    self.store.release.remote(key, self.owner)
                    raise
                self.store.publish.remote(key, entry, self.owner, bool(measured))
                return entry
            time.sleep(BASELINE_POLL_S)  # another actor is measuring this key


class BaselineStore:
    """Baseline entries by key for the whole cluster, and who is measuring which key (a Ray actor)."""

    def __init__(self, lease_s: float):
        self.lease_s = lease_s  # a claim older than this is handed to the next asker
        self.entries: dict[str, dict[str, Any]] = {}
        self.claims: dict[str, tuple[str, float]] = {}
        self.counts = collections.Counter()
        self.measured: collections.Counter = collections.Counter()  # measurements per key

    def claim(self, key: str, needed: tuple[str, ...], owner: str) -> tuple[str, dict[str, Any] | None]:
        """("entry", entry) when measured; ("yours", None): measure it and publish; ("wait", None)."""
        entry = self.entries.get(key)
        if entry_serves(entry, needed):
            self.counts["served"] += 1
            return "entry", entry
        holder = self.claims.get(key)
        if holder and holder[0] != owner and time.monotonic() - holder[1] < self.lease_s:
            return "wait", None
        self.claims[key] = (owner, time.monotonic())
        return "yours", None

    def publish(self, key: str, entry: dict[str, Any], owner: str, measured: bool) -> None:
        self.entries[key] = merge_entries(self.entries.get(key, {}), entry)
        if self.claims.get(key, ("",))[0] == owner:
            del self.claims[key]
        self.measured[key] += int(measured)

    def release(self, key: str, owner: str) -> None:
        if self.claims.get(key, ("",))[0] == owner:
            del self.claims[key]

    def forget(self, owner: str) -> None:
        """Drop the claims of an actor that died, so that another measures those keys."""
        for key in [k for k, (holder, _) in self.claims.items() if holder == owner]:
            del self.claims[key]

    def stats(self) -> dict[str, Any]:
        """keys: entries held; served: entries handed out; measured: measurements made by actors
        (an entry an actor read from its own disk cache is published but not measured)."""
        return {"keys": len(self.entries), "served": self.counts["served"], "measured": sum(self.measured.values()),
                "measured_by_key": dict(self.measured)}


class EvaluatorActor:
    """One Ray actor: a local Evaluator on this actor's GPU (Ray sets CUDA_VISIBLE_DEVICES) or CPU slot."""

    def __init__(self, backend: str, config: EvalConfig, cache_dir: str | None, build_workers: int,
                 store: Any, owner: str, omp_threads: str | None, niceness: int):
        # Workers forked from here inherit this thread's environment and priority. Ray sets
        # OMP_NUM_THREADS to the actor's CPU count, and starts workers at niceness 15 (its
        # worker_niceness), which would let any busy process on the host slow our builds and the
        # timed worker; take the driver's priority back where the OS allows it.
        if omp_threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = omp_threads
        for thread in (0, os.getpid()):  # this thread, and the process's main thread
            try:
                os.setpriority(os.PRIO_PROCESS, thread, niceness)
            except OSError:
                pass  # not permitted (no CAP_SYS_NICE): info() reports the niceness the workers run at
        self.niceness = os.getpriority(os.PRIO_PROCESS, 0)
        from .evaluator import Evaluator, default_cache_dir

        root = Path(cache_dir) if cache_dir else default_cache_dir()
        cluster = ClusterBaselines(BaselineCache(root / "baselines.json"), store, owner)
        self.evaluator = Evaluator(backend, config, cache_dir=root, build_workers=build_workers,
                                   baseline_cache=cluster)

    def info(self) -> dict[str, Any]:
        ray = import_ray()
        evaluator = self.evaluator
        return {"backend": evaluator.backend, "device_name": evaluator.device_name, "platform": evaluator.platform,
                "torch_version": evaluator.torch_version, "held_timing": evaluator.held_timing,
                "build_workers": evaluator.build_workers, "cache_dir": str(evaluator.cache_dir), "pid": os.getpid(),
                "niceness": self.niceness,
                "node_id": ray.get_runtime_context().get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

    def evaluate(self, task: Task, candidate: Any, backend: str, config: EvalConfig) -> dict[str, Any]:
        return self.evaluator.evaluate(task, candidate, backend=backend, config=config).to_dict()

    def baselines(self, task: Task, backend: str, config: EvalConfig) -> dict[str, Any]:
        return self.evaluator.baselines(task, backend=backend, config=config)

    def wait_until_warm(self) -> None:
        self.evaluator.wait_until_warm()

    def close(self) -> None:
        self.evaluator.close()

