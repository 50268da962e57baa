"""Tasks that cannot tell a kernel from a constant: their reference output barely depends on the
input (constant, near-zero, the same for every draw, or rounding noise). A correct verdict on such
a task earns no speed milestone (`eval.reward`), and the environments and the leaderboard leave
them out unless asked (`load_suite(..., include_degenerate=True)`).

The judge detects them itself on every evaluation (`correctness.degenerate_reason`, from the
trials' reference outputs); `degenerate_tasks.json` holds what that detector found on every task of
a suite, measured ahead of time (benchmarks/timed_check_margin.py records the detector's answer per
task; docs/evaluation-policy.md names the runs), so that tasks can be left out before any evaluation.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

DEGENERATE_FILE = Path(__file__).parent / "data" / "degenerate_tasks.json"


@functools.lru_cache(maxsize=1)
def degenerate_tasks() -> dict[str, str]:
    """{task id: why its output cannot tell a kernel from a constant}."""
    data = json.loads(DEGENERATE_FILE.read_text(encoding="utf-8"))
    return {task_id: entry["reason"] for task_id, entry in data["tasks"].items()}


def degenerate_reason(task_id: str) -> str | None:
    """Why `task_id` is degenerate, or None where it is not (or was never measured)."""
    return degenerate_tasks().get(task_id)


def without_degenerate(tasks: list, task_filter: Any = None) -> list:
    """`tasks` less the degenerate ones; a degenerate task that `task_filter` names by id is an error
    that says how to put it back."""
    named = {task_filter} if isinstance(task_filter, str) else (
        set(task_filter) if task_filter is not None and not callable(task_filter) else set())
    asked = sorted(task_id for task_id in named if degenerate_reason(task_id))
    if asked:
        raise ValueError(f"task_filter names degenerate tasks {asked[:5]}: their output cannot tell a kernel from a "
                         "constant, so they are left out; pass include_degenerate=True to judge them "
                         "(a correct verdict there earns no speed milestone)")
    return [task for task in tasks if degenerate_reason(task.id) is None]
