"""Named task suites. `builtin` ships with the package; others read local data (see docs/)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from .task import Task, task_from_file

BUILTIN_DIR = Path(__file__).parent / "builtin"
SOLUTIONS_DIR = BUILTIN_DIR / "solutions"

_LOADERS: dict[str, Callable[..., list[Task]]] = {}


def register_suite(name: str, loader: Callable[..., list[Task]]) -> None:
    _LOADERS[name] = loader


def suite_names() -> list[str]:
    return sorted(_LOADERS)


def load_suite(name: str = "builtin", *, levels: tuple[int, ...] | None = None, **kwargs) -> list[Task]:
    """Load a suite's tasks, sorted by id. `levels` keeps only those levels. (Every task: the
    environments and the leaderboard leave degenerate ones out, degenerate.without_degenerate.)"""
    if name not in _LOADERS:
        raise KeyError(f"unknown suite {name!r}; known suites: {', '.join(suite_names())}")
    tasks = _LOADERS[name](**kwargs)
    if levels is not None:
        tasks = [t for t in tasks if t.level in levels]
    return sorted(tasks, key=lambda t: t.id)


def get_task(task_id: str, **kwargs) -> Task:
    """Find a task by id (`builtin/L1/softmax`); the suite is the id's first part."""
    suite = task_id.split("/", 1)[0]
    for task in load_suite(suite, **kwargs):
        if task.id == task_id:
            return task
    raise KeyError(f"no task {task_id!r} in suite {suite!r}; list them with `cuda-gym tasks list {suite}`")


def load_builtin() -> list[Task]:
    tasks = []
    for level in (1, 2, 3):
        for path in sorted((BUILTIN_DIR / f"level{level}").glob("*.py")):
            tasks.append(task_from_file(path, suite="builtin", level=level))
    return tasks


def solution_path(task: Task, backend: str, language: str = "cuda") -> Path | None:
    """The shipped reference solution of a built-in task for a backend, if there is one. The
    `language="cuda"` ones are native code per backend (CUDA C++, C++); the `"triton"` ones serve
    both backends (on the CPU through Triton's interpreter); the `"cupy"` ones (CuPy RawKernel /
    RawModule sources) the cuda backend only."""
    if language == "cupy" and backend != "cuda":
        return None
    folder = language if language in ("triton", "cupy") else backend
    path = SOLUTIONS_DIR / folder / f"L{task.level}" / f"{task.name}.py"
    return path if path.exists() else None


register_suite("builtin", load_builtin)
