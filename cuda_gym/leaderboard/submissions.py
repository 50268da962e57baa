"""What a leaderboard judges: one candidate source per task, read from a folder or a rollout.

Two forms of SUBMISSIONS:

- a folder laid out `L<level>/<task name>.py` (cuda_gym's own solutions layout) or KernelBench's
  `level<level>/<task name>.py` (e.g. `level1/19_ReLU.py`); a file matches the task with that
  level and name;
- an agent run's `trajectories.jsonl` (`cuda_gym.trajectory`): each trajectory's best candidate
  (`Trajectory.best()`, CUDA Agent's best-in-trajectory rule); when a task has several
  trajectories, the one whose best ranks highest by the trajectory's own records (correct first,
  then speedup vs compile, then vs eager; the earliest episode on ties) is the task's submission.
  The choice uses only what the agent saw, never the leaderboard's hidden-seed verdicts.

Files or trajectories that match no selected task are reported, never silently dropped.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..tasks.task import Task

_LEVEL_DIR = re.compile(r"^(?:L|level)(\d+)$", re.IGNORECASE)


class SubmissionError(ValueError):
    """SUBMISSIONS cannot be read; the message says what to fix."""


@dataclass(frozen=True)
class Submission:
    """The candidate judged for one task. `source` is None when the trajectory had no candidate."""

    task_id: str
    source: str | None
    origin: str  # where it came from: a file path, or "<jsonl> trajectory <n> (episode e, turn t)"


@dataclass
class Submissions:
    by_task: dict[str, Submission] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)  # "<origin>: <why>", one per item not used
    kind: str = "folder"  # "folder" or "trajectories"


def read_submissions(path: str | Path, tasks: "list[Task]") -> Submissions:
    """The submissions in `path` (a folder or a `.jsonl` file) for `tasks`."""
    path = Path(path)
    if not path.exists():
        raise SubmissionError(f"submissions path {path} does not exist; pass a folder laid out "
                              "L<level>/<task name>.py (or level<level>/...) or a trajectories.jsonl file")
    if path.is_dir():
        return _from_folder(path, tasks)
    if path.suffix == ".jsonl":
        return _from_trajectories(path, tasks)
    raise SubmissionError(f"{path} is neither a folder of candidates nor a .jsonl file of trajectories")


def _from_folder(root: Path, tasks: "list[Task]") -> Submissions:
    by_key = {(t.level, t.name): t for t in tasks}
    found = Submissions(kind="folder")
    level_dirs = [d for d in sorted(root.iterdir()) if d.is_dir() and _LEVEL_DIR.match(d.name)]
    if not level_dirs:
        raise SubmissionError(f"{root} has no L<level>/ or level<level>/ folders; lay candidates out as "
                              f"{root}/L1/<task name>.py (e.g. L1/softmax.py or level1/19_ReLU.py)")
    for level_dir in level_dirs:
        level = int(_LEVEL_DIR.match(level_dir.name).group(1))
        for file in sorted(level_dir.glob("*.py")):
            task = by_key.get((level, file.stem))
            if task is None:
                found.unmatched.append(f"{file}: no selected task is level {level} named {file.stem!r}")
                continue
            if task.id in found.by_task:
                raise SubmissionError(f"two candidates for {task.id}: {found.by_task[task.id].origin} and {file}; "
                                      "keep one")
            try:
                source = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise SubmissionError(f"cannot read candidate {file}: {exc}") from None
            found.by_task[task.id] = Submission(task.id, source, str(file))
    return found


def _rank(best) -> tuple:
    def key(value: float | None) -> float:
        return -math.inf if value is None or math.isnan(value) else float(value)
    return (best.correct, key(best.speedup_vs_compile), key(best.speedup_vs_eager))


def _from_trajectories(path: Path, tasks: "list[Task]") -> Submissions:
    from cuda_gym.trajectory import read_trajectories

    try:
        trajectories = read_trajectories(path)
    except ValueError as exc:
        raise SubmissionError(str(exc)) from None
    if not trajectories:
        raise SubmissionError(f"{path} holds no trajectories")
    selected = {t.id for t in tasks}
    found = Submissions(kind="trajectories")
    chosen: dict[str, tuple[tuple, Submission]] = {}
    for number, trajectory in enumerate(trajectories, 1):
        origin = f"{path} trajectory {number} (episode {trajectory.episode}"
        if trajectory.task_id not in selected:
            found.unmatched.append(f"{origin}: task {trajectory.task_id!r} is not among the selected tasks")
            continue
        best = trajectory.best()
        if best is None:
            rank: tuple = (False, -math.inf, -math.inf)
            submission = Submission(trajectory.task_id, None, origin + "): no turns")
        else:
            rank = _rank(best)
            submission = Submission(trajectory.task_id, best.candidate,
                                    f"{origin}, turn {best.turn})" + ("" if best.candidate else ": no candidate"))
        previous = chosen.get(trajectory.task_id)
        if previous is None or rank > previous[0]:  # strict: the earliest episode wins ties
            chosen[trajectory.task_id] = (rank, submission)
    found.by_task = {task_id: submission for task_id, (_, submission) in chosen.items()}
    return found
