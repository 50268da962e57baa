"""`EvaluatorInterface`: what every evaluator offers its callers (environments, the service, the CLI,
the leaderboard, the agents), whether it judges here (`Evaluator`), on Ray actors (`RayEvaluator`,
distributed.py) or on a `cuda-gym serve` service (`RemoteEvaluator`, remote.py).

A caller that holds an evaluator relies on these members only; an implementation may add its own
(`Evaluator.held_timing`, `RayEvaluator.stats`, `RemoteEvaluator.fetch`). tests/test_interface.py
checks that each implementation, and each test stand-in (tests/fakes.py), follows it.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from ..tasks.task import Task
from .config import EvalConfig
from .result import EvalResult


@runtime_checkable
class EvaluatorInterface(Protocol):
    """Judges candidates on tasks. Use as a context manager, or call `close()`.

    backend: "cuda" or "cpu", what `backend=None` means in the calls below.
    device_name: the device the verdicts are timed on ("cpu" on the cpu backend).
    config: the `EvalConfig` a call that names none is judged under.
    torch_version: the torch version of the workers that judge.
    """

    backend: str
    device_name: str
    config: EvalConfig
    torch_version: str

    def evaluate(self, task: Task, candidate: Any, *, backend: str | None = None,
                 config: EvalConfig | None = None) -> EvalResult:
        """Judge `candidate` (source text or `Candidate`) on `task` and wait for the verdict. A bad
        candidate is a verdict, never an exception."""
        ...

    def submit(self, task: Task, candidate: Any, *, backend: str | None = None,
               config: EvalConfig | None = None) -> Future:
        """Like `evaluate`, but returns a `concurrent.futures.Future[EvalResult]`."""
        ...

    def baselines(self, task: Task, *, backend: str | None = None, config: EvalConfig | None = None) -> dict[str, Any]:
        """The task's eager / torch.compile times: {'eager': TimingStats | None, 'compile': ...,
        'errors': {name: why}, ...} (`Evaluator.baselines` lists every key)."""
        ...

    def prewarm(self, tasks: list[Task], *, backend: str | None = None, config: EvalConfig | None = None,
                parallel: int | None = None) -> dict[str, str]:
        """Prepare the tasks' baselines ahead of their timing where that helps; {task id: "" or why
        it failed}, {} where there is nothing to do."""
        ...

    def wait_until_warm(self) -> None:
        """Return once the next evaluation would find a warm worker."""
        ...

    def close(self) -> None:
        """Stop judging and free the workers; calling it again does nothing."""
        ...

    def __enter__(self) -> Any:
        ...

    def __exit__(self, *exc: Any) -> None:
        ...


def interface_methods() -> dict[str, Any]:
    """The interface's methods by name (what tests/test_interface.py compares signatures of)."""
    return {name: value for name, value in vars(EvaluatorInterface).items()
            if callable(value) and (not name.startswith("_") or name in ("__enter__", "__exit__"))}


def interface_attributes() -> tuple[str, ...]:
    """The interface's data attributes."""
    return tuple(EvaluatorInterface.__annotations__)
