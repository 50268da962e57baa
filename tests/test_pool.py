"""The worker pool: spares are handed out oldest first, started together once the last is taken,
and a job never waits for a start while a ready spare exists."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_gym.eval.pool import OWNER_FILE, WorkerPool, WorkerSpec, remove_orphaned_scratch

from .helpers import GELU_TASK
from .leaks import leaked, snapshot


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


ENDLESS_EVALUATION = """
import sys, time
from cuda_gym.eval import EvalConfig, Evaluator
from cuda_gym.tasks import get_task
task = get_task(sys.argv[1])
source = task.source + "\\n\\nclass ModelNew(Model):\\n    def forward(self, *args):\\n        while True:\\n            pass\\n"
evaluator = Evaluator("cpu", EvalConfig(baselines=(), policy="permissive", eval_timeout_s=600.0))
evaluator.submit(task, source)
print("submitted", flush=True)
time.sleep(600)
"""


def test_a_worker_in_an_endless_loop_dies_with_its_evaluators_process(tmp_path):
    # Killing the evaluator's process (SIGKILL: no close(), no atexit) must not leave its worker
    # running the candidate's loop, orphaned, at full CPU. (Here the worker went also without
    # sandbox.die_with_parent; that guard is for the orphan seen once after a test run was stopped,
    # a worker whose parent had died, 37 minutes at full CPU, not reproduced.)
    cache = tmp_path / "cache"
    before = snapshot()
    env = {**os.environ, "CUDA_GYM_CACHE": str(cache)}
    process = subprocess.Popen([sys.executable, "-c", ENDLESS_EVALUATION, GELU_TASK], env=env,
                               cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "submitted"
        time.sleep(8.0)  # the worker starts, makes the reference outputs and enters the loop
    finally:
        process.kill()
        process.wait()
    leftovers = leaked(before, str(cache), grace_s=15.0)
    assert not leftovers, f"processes left behind: {leftovers}"


_PRELOADED = """
import cuda_gym.eval.preload as preload
from torch._inductor.cpu_vec_isa import pick_vec_isa, valid_vec_isa_list
from torch._inductor.codecache import torch_key

def holds_bytes(value):
    return isinstance(value, bytes) or (isinstance(value, (list, tuple)) and any(isinstance(v, bytes) for v in value))

if hasattr(torch_key, "cache_info"):  # functools, in some torch versions
    hashed = torch_key.cache_info().currsize == 1
else:  # a cache of torch's own (torch.utils._functools in 2.13): the value sits in its closure
    cells = []
    for cell in torch_key.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    hashed = any(holds_bytes(v) for v in cells)
print(preload.compiles_for_a_gpu(), valid_vec_isa_list.cache_info().currsize, hashed)
print(pick_vec_isa())
"""


@pytest.mark.slow
def test_the_fork_server_makes_inductors_cpu_isa_check_once_for_every_worker(tmp_path):
    """preload.py (imported by the fork server, before any fork) makes inductor's check of the CPU's
    vector instructions, so that forked workers inherit its answer instead of each paying about
    0.7-0.9 s (a dry compile and a child Python per instruction set) at its first torch.compile
    (not on a GPU machine, where the workers compile for the GPU), and hashes torch's source for
    inductor's cache keys (0.15 s per process). The answer is the one a fresh process finds."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    preloaded = subprocess.run([sys.executable, "-c", _PRELOADED], capture_output=True, text=True, env=env, timeout=300)
    assert preloaded.returncode == 0, preloaded.stderr[-2000:]
    (gpu_host, checked, hashed), isa = preloaded.stdout.split("\n")[0].split(), preloaded.stdout.split("\n")[1]
    assert hashed == "True"  # torch's source hashed at import
    assert checked == ("0" if gpu_host == "True" else "1")  # made at import, before anything asked for it
    fresh = subprocess.run(
        [sys.executable, "-c", "from torch._inductor.cpu_vec_isa import pick_vec_isa\nprint(pick_vec_isa())\n"],
        capture_output=True, text=True, env=env, timeout=300)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert isa == fresh.stdout.split("\n")[0]


def test_a_failed_cpu_isa_check_in_the_fork_server_is_not_inherited(tmp_path):
    """Where the fork server's check finds no usable instruction set (here: a compiler that says
    its version and fails every build), it keeps no answer, so that each worker checks for itself
    as it did before the fork server made the check."""
    compiler = tmp_path / "failing-g++"
    compiler.write_text('#!/bin/sh\ncase "$1" in --version|-v) exec g++ "$@";; esac\nexit 1\n')
    compiler.chmod(0o755)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), CXX=str(compiler))
    env.pop("TORCHINDUCTOR_VEC_ISA_OK", None)
    code = ("import cuda_gym.eval.preload\n"
            "from torch._inductor.cpu_vec_isa import VecISA, valid_vec_isa_list\n"
            "print(valid_vec_isa_list.cache_info().currsize, VecISA._VecISA__bool__impl.cache_info().currsize)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[0] == "0 0"


HOLD_OWNER = """
import sys
from pathlib import Path
from cuda_gym.eval.pool import _hold_owner
assert _hold_owner(Path(sys.argv[1])) is not None
print("holding", flush=True)
sys.stdin.readline()
"""


def test_scratch_left_by_a_killed_owner_is_removed_and_a_live_owners_stays(tmp_path):
    old = time.time() - 3600

    def scratch(name: str, owner_file: bool = True, age: float = old) -> Path:
        path = tmp_path / name
        (path / "inductor").mkdir(parents=True)
        if owner_file:
            (path / OWNER_FILE).write_text("")
            os.utime(path / OWNER_FILE, (age, age))
        return path

    orphan = scratch("cg-eval-orphan")  # its owner's flock went with it
    young = scratch("cg-eval-young", age=time.time())  # an owner may be between making and locking it
    unowned = scratch("cg-eval-unowned", owner_file=False)  # made before owners were recorded
    live = scratch("cg-build-live")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_OWNER, str(live)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # another process, as another evaluator
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert remove_orphaned_scratch(tmp_path) == 1
        assert not orphan.exists() and young.exists() and unowned.exists() and live.exists()
    finally:
        holder.kill()
        holder.wait()
    assert remove_orphaned_scratch(tmp_path) == 1 and not live.exists()  # its owner was killed
    # A real worker's scratch directory is held by this process while the worker lives.
    (tmp_path / "run").mkdir()
    pool = WorkerPool()
    try:
        worker = pool.acquire(_spec(tmp_path / "run"), spares=0)
        os.utime(worker.scratch / OWNER_FILE, (old, old))
        assert remove_orphaned_scratch(tmp_path / "run") == 0 and worker.scratch.exists()
        worker.kill()
    finally:
        pool.close()


def test_deferred_spares_are_topped_up_during_a_job_and_never_waited_for(tmp_path, monkeypatch):
    deferred = WorkerSpec(role="baseline", backend="cpu", root=tmp_path, isolate_network=False, cpu_threads=1,
                          defer_device=True)
    pool = WorkerPool()
    try:
        pool.acquire(_spec(tmp_path), spares=1).kill()  # a device-warming spec whose spare is taken
        first = pool.acquire(deferred, spares=2)
        pool.replenish(only=deferred)  # as the evaluator does while `first` holds the device
        stock = pool._spares[pool._key(deferred)]
        assert len(stock) == 2
        assert not pool._spares.get(pool._key(_spec(tmp_path))), "only the deferred spec may start during a job"
        waited = []
        monkeypatch.setattr(type(stock[0]), "wait_ready", lambda self, *a: waited.append(self))
        pool.settle()
        assert waited == [], "settle waited for spares that never touch the device"
        monkeypatch.undo()
        # A deferred spare readies no device before its job: its ready message names none.
        assert stock[0].wait_ready()["device"] == ""
        taken = pool.acquire(deferred, spares=2)
        pool.replenish(only=deferred)  # topped up again at once, not only once none is left
        assert len(pool._spares[pool._key(deferred)]) == 2
        for worker in (first, taken):
            worker.kill()
    finally:
        pool.close()
