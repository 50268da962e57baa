"""The worker pool: spares are handed out oldest first, started together once the last is taken,
and a job never waits for a start while a ready spare exists."""
from __future__ import annotations

from cuda_gym.eval.pool import WorkerPool, WorkerSpec


def _spec(tmp_path) -> WorkerSpec:
    # A CPU baseline worker: it starts, says it is ready and waits for a job (none is sent here).
    return WorkerSpec(role="baseline", backend="cpu", root=tmp_path, isolate_network=False, cpu_threads=1)


def test_spares_start_together_once_the_last_is_taken(tmp_path):
    pool = WorkerPool()
    try:
        first = pool.acquire(_spec(tmp_path), spares=3)  # none yet: a new worker
        first.kill()
        pool.replenish()
        pool.settle()
        stock = pool._spares[pool._key(_spec(tmp_path))]
        assert len(stock) == 3 and all(w.process.pid for w in stock)
        started = [w.process.pid for w in stock]
        taken = [pool.acquire(_spec(tmp_path), spares=3) for _ in range(2)]
        assert [w.process.pid for w in taken] == started[:2]  # oldest first, none started anew
        for worker in taken:
            worker.kill()
        pool.replenish()  # one spare is left: nothing starts
        assert [w.process.pid for w in pool._spares[pool._key(_spec(tmp_path))]] == started[2:]
        last = pool.acquire(_spec(tmp_path), spares=3)
        assert last.process.pid == started[2]
        last.kill()
        pool.replenish()  # the last was taken: three start together
        assert len(pool._spares[pool._key(_spec(tmp_path))]) == 3
    finally:
        pool.close()
    assert not any(pool._spares.values())


def test_no_spares_means_a_new_worker_each_time(tmp_path):
    pool = WorkerPool()
    try:
        worker = pool.acquire(_spec(tmp_path), spares=0)
        worker.kill()
        pool.replenish()
        assert not pool._spares.get(pool._key(_spec(tmp_path)))
    finally:
        pool.close()


def test_a_worker_asked_to_yield_the_cpu_runs_on_idle_time_only(tmp_path):
    import os

    spec = _spec(tmp_path)
    yielding = WorkerPool().acquire(WorkerSpec(**{**spec.__dict__, "yield_cpu": True}), spares=0)
    plain = WorkerPool().acquire(spec, spares=0)
    try:
        yielding.wait_ready()
        plain.wait_ready()
        assert os.sched_getscheduler(yielding.process.pid) == os.SCHED_IDLE
        assert os.sched_getscheduler(plain.process.pid) != os.SCHED_IDLE
    finally:
        yielding.kill()
        plain.kill()
