"""RayEvaluator on a local Ray cluster of 2 CPUs with 2 CPU actors: the same verdicts as the local
Evaluator (reference solutions, hostile candidates, a wrong one), backpressure, task affinity, one
baseline measurement per key for the cluster, and no verdict lost when actors are killed mid-job."""
from __future__ import annotations

import os
import signal
import time

import pytest
import ray
from gymnasium.vector import SyncVectorEnv

from cuda_gym.envs import KernelEnv
from cuda_gym.eval import ErrorCode, EvaluatorInterface
from cuda_gym.eval.distributed import RayEvaluator
from cuda_gym.tasks import get_task, solution_path

from .conftest import TEST_CONFIG
from .helpers import CORRECT_BODY, GELU_TASK, native_candidate
from .test_hostile import HOSTILE_DIR, header

MAX_PENDING = 2
SOLUTIONS = ["builtin/L1/gelu", "builtin/L1/softmax", "builtin/L2/linear_gelu", "builtin/L3/mlp"]
HOSTILE = ["cpu_forge_worker_message", "cpu_os_exit_fake_stdout", "cpu_huge_alloc_torch", "cpu_torch_fallback_decoy"]
WRONG = native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i];")
# Slow enough (a sleep in every forward call) to be caught in flight by a poll of stats().
SLOW_SUFFIX = '''

_Fast = ModelNew


class ModelNew(_Fast):
    def forward(self, *args):
        import time
        time.sleep(0.3)
        return super().forward(*args)
'''


@pytest.fixture(scope="module")
def ray_evaluator(tmp_path_factory):
    started = not ray.is_initialized()
    environ, sigterm = dict(os.environ), signal.getsignal(signal.SIGTERM)
    if started:
        ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        # Its own cache: the actors build every candidate themselves (none is cached by the local evaluator).
        with RayEvaluator("cpu", num_actors=2, config=TEST_CONFIG, max_pending=MAX_PENDING,
                          cache_dir=str(tmp_path_factory.mktemp("ray_cache"))) as evaluator:
            yield evaluator
    finally:
        if started:
            ray.shutdown()
            # ray.init leaves PYTHONBREAKPOINT and RAY_* variables and a SIGTERM handler behind;
            # later tests' evaluators would hand them to their workers.
            for name in set(os.environ) - set(environ):
                del os.environ[name]
            os.environ.update(environ)
            signal.signal(signal.SIGTERM, sigterm)


@pytest.mark.slow
def test_the_ray_evaluator_instance_is_an_evaluator_interface(ray_evaluator):
    assert isinstance(ray_evaluator, EvaluatorInterface)  # its methods' parameters: tests/test_interface.py
    assert ray_evaluator.backend == "cpu" and ray_evaluator.device_name == "cpu" and ray_evaluator.torch_version


def _jobs() -> list[tuple[str, object, str]]:
    """(name, task, candidate) for the comparison, judged with the test config (its timeouts: none of
    these candidates hangs, and test_hostile.py's shorter ones would make verdicts depend on load)."""
    jobs = [(task_id, get_task(task_id), solution_path(get_task(task_id), "cpu").read_text()) for task_id in SOLUTIONS]
    for name in HOSTILE:
        path = HOSTILE_DIR / f"{name}.py"
        jobs.append((name, get_task(header(path)["task"]), path.read_text()))
    jobs.append(("wrong", get_task(GELU_TASK), WRONG))
    return jobs


def _verdict(result) -> tuple:
    return (result.error_code, result.compiled, result.correct, [t.passed for t in result.trials],
            result.forbidden_ops, result.candidate_hash)


@pytest.mark.slow
def test_verdicts_equal_the_local_evaluator_and_submit_blocks_when_the_queue_is_full(ray_evaluator, cpu_evaluator):
    assert ray_evaluator.backend == "cpu" and len(ray_evaluator.actors) == 2
    jobs = _jobs()
    assert len(jobs) > 2 * ray_evaluator.jobs_per_actor + MAX_PENDING, "the stream must overfill the queue"
    submit_seconds, futures = [], []
    for name, task, source in jobs:
        started = time.monotonic()
        futures.append(ray_evaluator.submit(task, source))
        submit_seconds.append(time.monotonic() - started)
    local = {name: cpu_evaluator.evaluate(task, source) for name, task, source in jobs}
    remote = {name: future.result(timeout=600) for (name, *_), future in zip(jobs, futures)}

    mismatches = {name: (_verdict(local[name])[:5], _verdict(remote[name])[:5], remote[name].message[:300])
                  for name in local if _verdict(local[name]) != _verdict(remote[name])}
    assert not mismatches, mismatches
    for name in SOLUTIONS:
        assert remote[name].ok and remote[name].candidate_time.median_ms > 0, remote[name].message
        assert remote[name].eager_time is not None, "the baseline reached the verdict"
    for name in HOSTILE:
        assert remote[name].error_code is ErrorCode(header(HOSTILE_DIR / f"{name}.py")["expected"]), name
    assert remote["wrong"].error_code is ErrorCode.INCORRECT

    stats = ray_evaluator.stats()
    assert stats["max_pending_seen"] == MAX_PENDING, stats  # filled, and never beyond
    assert max(submit_seconds) > 0.5, f"no submit waited for room: {submit_seconds}"
    assert all(slot["jobs_done"] > 0 for slot in stats["slots"]), "both actors judged candidates"


@pytest.mark.slow
def test_a_task_returns_to_its_actor_and_baselines_are_measured_once(ray_evaluator):
    sequential = get_task("builtin/L1/cumsum")
    source = solution_path(sequential, "cpu").read_text()
    for index in range(2):
        result = ray_evaluator.evaluate(sequential, source.replace("r'''", f"r'''\n// variant {index}\n", 1)
                                        if "r'''" in source else source + f"\n# variant {index}\n")
        assert result.ok, result.message
    assert len(ray_evaluator.stats()["dispatches"][sequential.id]) == 1, "an idle home actor takes its task back"

    # Enough at once that the home actor is busy: both actors judge the task, one measures its baseline.
    shared = get_task("builtin/L1/sum_dim")
    source = solution_path(shared, "cpu").read_text()
    futures = [ray_evaluator.submit(shared, source + f"\n# variant {index}\n") for index in range(3)]
    assert all(future.result(timeout=300).ok for future in futures)
    stats = ray_evaluator.stats()
    assert len(stats["dispatches"][shared.id]) == 2, stats["dispatches"]
    measured = {key: n for key, n in stats["baselines"]["measured_by_key"].items() if key.startswith(shared.id + "|")}
    assert list(measured.values()) == [1], measured
    assert stats["baselines"]["served"] >= 1
    assert ray_evaluator.baselines(shared)["eager"].median_ms > 0

    # The environments take a RayEvaluator as they take an Evaluator (the vector recipe: one shared evaluator).
    envs = SyncVectorEnv([lambda: KernelEnv(backend="cpu", evaluator=ray_evaluator, max_turns=2) for _ in range(2)])
    envs.reset(options={"task_id": shared.id})
    _, rewards, _, _, infos = envs.step(("#! check\n" + source, "not a candidate"))
    assert list(infos["verdict"]) == ["OK", "INVALID_ACTION"] and list(rewards) == [1.0, -1.0]
    envs.close()
    assert ray_evaluator.evaluate(shared, "").error_code is ErrorCode.INVALID_ACTION, "closing the envs left it open"


def _wait_for(evaluator, find, what: str, timeout_s: float = 120.0) -> dict:
    """Poll `evaluator.stats()` until `find(stats)` returns a slot."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = find(evaluator.stats())
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}: {evaluator.stats()}")


@pytest.mark.slow
def test_killed_actors_lose_no_verdict_and_a_candidate_that_kills_two_gets_runtime_error(ray_evaluator):
    before = ray_evaluator.stats()
    poison_task = get_task("builtin/L1/softmax")
    poison = ray_evaluator.submit(poison_task, solution_path(poison_task, "cpu").read_text() + SLOW_SUFFIX)
    innocents = [ray_evaluator.submit(get_task(GELU_TASK), native_candidate(CORRECT_BODY + f"// kill drill {i}"))
                 for i in range(4)]

    def running_poison(stats, alone=False):
        for slot in stats["slots"]:
            if poison_task.id in slot["in_flight"] and slot["ready"] and (slot["isolated"] or not alone):
                return slot
        return None

    first = _wait_for(ray_evaluator, running_poison, "the poison candidate on an actor")
    ray.kill(ray_evaluator.actors[first["index"]])
    # It runs once more, alone on an actor; killing that one too makes the verdict RUNTIME_ERROR.
    second = _wait_for(ray_evaluator, lambda stats: running_poison(stats, alone=True), "the poison rerun alone")
    assert second["in_flight"] == [poison_task.id]
    ray.kill(ray_evaluator.actors[second["index"]])

    result = poison.result(timeout=300)
    assert result.error_code is ErrorCode.RUNTIME_ERROR, (result.error_code, result.message)
    assert "two evaluator actors died" in result.message
    innocent_results = [future.result(timeout=300) for future in innocents]
    assert [r.error_code for r in innocent_results] == [ErrorCode.OK] * 4, [r.message for r in innocent_results]

    after = ray_evaluator.stats()
    assert after["actor_deaths"] - before.get("actor_deaths", 0) == 2
    assert after["replacements"] - before.get("replacements", 0) == 2
    assert after["verdicts_by_deaths"] - before.get("verdicts_by_deaths", 0) == 1
    assert after["reruns"] - before.get("reruns", 0) >= 1  # the poison's; and each innocent that was beside it
    assert after["judged"] == after["submitted"], "every submitted candidate has its verdict"
    assert [slot["generation"] for slot in after["slots"]] != [slot["generation"] for slot in before["slots"]]
    # The replacement judges candidates.
    assert ray_evaluator.evaluate(get_task(GELU_TASK), native_candidate(CORRECT_BODY)).ok


def test_commands_take_ray_options_and_refuse_actors_without_ray():
    from cuda_gym.cli import build_parser, make_evaluator

    args = build_parser().parse_args(["run", "--ray", "auto", "--ray-actors", "2", "--backend", "cpu"])
    assert (args.ray, args.ray_actors) == ("auto", 2)
    args = build_parser().parse_args(["eval", GELU_TASK, "candidate.py", "--ray-actors", "2"])
    with pytest.raises(SystemExit, match="--ray-actors needs --ray"):
        make_evaluator(args)


def test_prewarm_is_accepted_and_does_nothing_across_actors(ray_evaluator):
    # `cuda-gym run` prewarms through whichever evaluator it has (a missing method crashed `--ray`);
    # each actor's node compiles its own baselines.
    assert ray_evaluator.prewarm([get_task(GELU_TASK)]) == {}
