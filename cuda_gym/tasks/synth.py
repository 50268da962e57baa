"""The `synth` suite: tasks written by `cuda-gym synth`, read from their directory.

`load_suite("synth", data_path=DIR)` (or `$CUDA_GYM_SYNTH`) reads `DIR/level<k>/<name>.py`, where
k is the number of chained seed operators; task ids are `synth/L<k>/<name>`. Sizes and tags come
from each file's CUDA_GYM metadata, so the tasks run at their per-backend sizes. The reader lives
with the other suites (the synthesizer, `cuda_gym.synth`, sits a layer above and only writes them).
"""
from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from .kernelbench import DataNotFoundError, change_stamp, resolve_data_path
from .suites import register_suite
from .task import Task, task_from_file

ENV_VAR = "CUDA_GYM_SYNTH"
SUITE = "synth"
SYNTH_HELP = f"""\
Synthesized tasks are made by `cuda-gym synth --out DIR` (see docs/synthesis.md); point the suite at DIR:
  - pass data_path=DIR (load_suite("synth", data_path=DIR), gym.make("CudaKernel-Synth-v1", data_path=DIR)),
  - or set the environment variable {ENV_VAR}=DIR."""
_LEVEL_DIR = re.compile(r"^level(\d+)$")


@functools.lru_cache(maxsize=8)
def _load_cached(resolved: str, stamp: int) -> tuple[Task, ...]:
    root = Path(resolved)
    tasks = []
    for level_dir in sorted(p for p in root.iterdir() if p.is_dir() and _LEVEL_DIR.match(p.name)):
        level = int(_LEVEL_DIR.match(level_dir.name).group(1))
        tasks.extend(task_from_file(path, suite=SUITE, level=level) for path in sorted(level_dir.glob("*.py")))
    if not tasks:
        raise DataNotFoundError(f"{resolved} holds no level<k>/*.py task files.\n{SYNTH_HELP}")
    return tuple(tasks)


def _stamp(path: Path) -> int:
    """Changes when a task file is added, removed or rewritten (the manifest is rewritten last)."""
    return sum(change_stamp(p) for p in [path, path / "manifest.json", *path.glob("level*")])


def load_synth(data_path: str | os.PathLike | None = None) -> list[Task]:
    """The synthesized tasks under `data_path` (or $CUDA_GYM_SYNTH); cached per path and change stamp."""
    path = resolve_data_path(data_path, ENV_VAR, SYNTH_HELP, "synthesized-task")
    if not path.is_dir():
        raise DataNotFoundError(f"{path} is not a directory.\n{SYNTH_HELP}")
    return list(_load_cached(str(path), _stamp(path)))


register_suite(SUITE, load_synth)
