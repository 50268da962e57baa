"""Stand-ins for an evaluator in tests that are not about judging. Each follows
`cuda_gym.eval.EvaluatorInterface` (tests/test_interface.py checks it), so code under test sees the
same surface a real evaluator offers.

- `CannedEvaluator`: canned verdicts, in order; records what it was asked (the environments).
- `FakeJudge`: verdicts named by the candidate text, at once or when a gate opens (the service).
- `SeedRecordingEvaluator`: records the seed each candidate was judged under (the leaderboard).
- `RecordingEvaluator`: a real evaluator, recording the config of each call (the template sweep).
- `NeverDone`: futures that never finish; `evaluate` must not be called (the template sweep).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, Callable

from cuda_gym.eval import EvalConfig
from cuda_gym.eval.result import ErrorCode, EvalResult, TimingStats, TrialResult


class FakeEvaluatorBase:
    """The interface with nothing measured: `judge` makes each verdict; `submit` returns it done."""

    backend, device_name, torch_version = "cpu", "cpu", "test"

    def __init__(self, config: EvalConfig | None = None):
        self.config = config or EvalConfig()
        self.closed = False

    def judge(self, task, candidate, backend, config) -> EvalResult:
        raise NotImplementedError

    def evaluate(self, task, candidate, *, backend=None, config=None) -> EvalResult:
        return self.judge(task, candidate, backend, config)

    def submit(self, task, candidate, *, backend=None, config=None) -> Future:
        future: Future = Future()
        future.set_result(self.judge(task, candidate, backend, config))
        return future

    def baselines(self, task, *, backend=None, config=None) -> dict:
        return {"eager": None, "compile": None, "errors": {}}

    def prewarm(self, tasks, *, backend=None, config=None, parallel=None) -> dict[str, str]:
        return {}

    def wait_until_warm(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------------- the environments

def timing(ms):
    return TimingStats(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, reps=5, method="wall")


def ok_result(task_id, ms=1.0, eager_ms=2.0, compiled_ms=None):
    result = EvalResult(task_id=task_id, backend="cpu", error_code=ErrorCode.OK, message="correct", compiled=True,
                        correct=True, candidate_time=timing(ms), trials=[TrialResult("task", True, 1e-7, 1e-7, 1e-8)])
    if eager_ms:
        result.eager_time = timing(eager_ms)
        result.speedup_vs_eager = eager_ms / ms
    if compiled_ms:
        result.compile_time = timing(compiled_ms)
        result.speedup_vs_compile = compiled_ms / ms
    return result


class CannedEvaluator(FakeEvaluatorBase):
    """Returns canned results (`results`: functions of the task id, used in order, then `ok_result`)
    and records what it was asked in `calls`."""

    def __init__(self, results: tuple[Callable[[str], EvalResult], ...] = (), backend="cpu", device_name="cpu"):
        super().__init__(EvalConfig(baselines=("eager",)))
        self.backend = backend
        self.device_name = device_name
        self.results = list(results)
        self.calls: list[dict[str, Any]] = []

    def judge(self, task, candidate, backend, config) -> EvalResult:
        self.calls.append({"task": task.id, "source": candidate.source, "backend": backend, "config": config})
        make = self.results.pop(0) if self.results else ok_result
        return make(task.id)


# ------------------------------------------------------------------------------ the service

def rich_result(task_id: str, code: ErrorCode) -> EvalResult:
    """A verdict with every kind of field filled in, infinite errors included."""
    stats = TimingStats(median_ms=1.25, min_ms=1.0, max_ms=2.0, iqr_ms=0.1, reps=5, method="wall",
                        detail={"open_median_ms": 1.3})
    return EvalResult(
        task_id=task_id, backend="cpu", error_code=code, message=f"fake {code.value}", device="fake-cpu",
        torch_version="0", candidate_hash="abc", compiled=True, correct=code is ErrorCode.OK,
        trials=[TrialResult("normal", code is ErrorCode.OK, float("inf") if code is not ErrorCode.OK else 1e-7,
                            2e-7, 3e-7, "trial message")],
        candidate_time=stats, eager_time=stats, speedup_vs_eager=1.0 if code is ErrorCode.OK else None,
        host_pairing={"skipped": "cpu"}, flags=["a_flag"], kernels=["k"], kernel_profile=[{"name": "k", "count": 1}],
        compile_seconds=0.5, eval_seconds=1.5, stage_seconds={"load": 0.1}, reference_error={"skipped": "why"})


class FakeJudge(FakeEvaluatorBase):
    """Made-up verdicts: the candidate's text names the code ('OK', 'INCORRECT', 'RUNTIME_ERROR');
    a candidate with 'hold' waits until `gate` is set."""

    backend, device_name, torch_version = "cpu", "fake-cpu", "0"

    def __init__(self, config: EvalConfig | None = None):
        super().__init__(config)
        self.gate = threading.Event()

    def baselines(self, task, *, backend=None, config=None) -> dict:
        return {"eager": rich_result(task.id, ErrorCode.OK).eager_time, "compile": None,
                "errors": {"compile": "skipped"}, "worker_medians_ms": {"eager": [1.25], "compile": None}}

    def evaluate(self, task, candidate, *, backend=None, config=None) -> EvalResult:
        return self.submit(task, candidate, backend=backend, config=config).result()

    def submit(self, task, candidate, *, backend=None, config=None) -> Future:
        future: Future = Future()
        candidate = getattr(candidate, "source", candidate)
        code = next((c for c in ErrorCode if c.value in candidate), ErrorCode.INVALID_ACTION)

        def judge():
            if "hold" in candidate:
                self.gate.wait()
            future.set_result(rich_result(task.id, code))

        threading.Thread(target=judge, daemon=True).start()
        return future


# ---------------------------------------------------------------------- leaderboard, sweeps

class SeedRecordingEvaluator(FakeEvaluatorBase):
    """Judges every candidate INCORRECT and records the seed of the config it was handed."""

    def __init__(self):
        super().__init__(EvalConfig(baselines=("eager",)))
        self.seeds: list[int] = []

    def judge(self, task, candidate, backend, config) -> EvalResult:
        self.seeds.append(config.seed)
        return EvalResult(task_id=task.id, backend="cpu", error_code=ErrorCode.INCORRECT)


class RecordingEvaluator:
    """`evaluator` itself, recording the config each `submit` and `evaluate` was given."""

    def __init__(self, evaluator):
        self.evaluator = evaluator
        self.submitted, self.evaluated = [], []

    backend = property(lambda self: self.evaluator.backend)
    device_name = property(lambda self: self.evaluator.device_name)
    config = property(lambda self: self.evaluator.config)
    torch_version = property(lambda self: self.evaluator.torch_version)

    def submit(self, task, candidate, *, backend=None, config=None) -> Future:
        self.submitted.append(config)
        return self.evaluator.submit(task, candidate, backend=backend, config=config)

    def evaluate(self, task, candidate, *, backend=None, config=None) -> EvalResult:
        self.evaluated.append(config)
        return self.evaluator.evaluate(task, candidate, backend=backend, config=config)

    def baselines(self, task, *, backend=None, config=None) -> dict:
        return self.evaluator.baselines(task, backend=backend, config=config)

    def prewarm(self, tasks, *, backend=None, config=None, parallel=None) -> dict[str, str]:
        return self.evaluator.prewarm(tasks, backend=backend, config=config, parallel=parallel)

    def wait_until_warm(self) -> None:
        self.evaluator.wait_until_warm()

    def close(self) -> None:
        pass  # the wrapped evaluator is its owner's to close

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class NeverDone(FakeEvaluatorBase):
    """A judge that never answers: `submit`'s futures never finish, and `evaluate` fails the test."""

    def submit(self, task, candidate, *, backend=None, config=None) -> Future:
        return Future()

    def evaluate(self, task, candidate, *, backend=None, config=None) -> EvalResult:
        raise AssertionError("phase B must not run: nothing was judged correct")
