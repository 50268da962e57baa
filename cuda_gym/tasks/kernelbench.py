"""The `kernelbench` suite: KernelBench's problems, read from local data (nothing is downloaded).

Accepted layouts for `data_path` (or the `CUDA_GYM_KERNELBENCH` environment variable):

- a KernelBench checkout (`<path>/KernelBench/level1/1_Square_matrix_multiplication_.py`, ...),
  or its inner `KernelBench/` folder (`<path>/level1/*.py`);
- the Hugging Face dataset (`ScalingIntelligence/KernelBench`): a folder holding its parquet files
  (searched recursively, e.g. `data/level_1-00000-of-00001.parquet`) or one parquet file. Columns
  used: `code`, `level`, `name` (and `problem_id` when `name` lacks the number prefix).

Task ids are `kernelbench/L<level>/<file stem>`, e.g. `kernelbench/L1/1_Square_matrix_multiplication_`,
the same for both layouts. Sources are kept byte for byte; KernelBench has no per-backend sizes, so
`Task.sizes` is empty (the file's own constants are used on every backend).
"""
from __future__ import annotations

import functools
import os
import re
import warnings
from pathlib import Path
from typing import Any, Iterable

from .suites import register_suite
from .task import Task, TaskFormatError, task_from_source

ENV_VAR = "CUDA_GYM_KERNELBENCH"
SUITE = "kernelbench"
_LEVEL_DIR = re.compile(r"^level_?(\d+)$")
_LEVEL_FILE = re.compile(r"level_?(\d+)")

KERNELBENCH_HELP = f"""\
KernelBench data is not downloaded by cuda_gym; point it at a local copy:
  - pass data_path=... (gym.make("CudaKernel-L1-v1", data_path=...), or load_suite("kernelbench", data_path=...)),
  - or set the environment variable {ENV_VAR}=/path/to/data.
Accepted layouts:
  - a KernelBench checkout: <path>/KernelBench/level1/1_Square_matrix_multiplication_.py ...
        git clone https://github.com/ScalingIntelligence/KernelBench /path/to/KernelBench-repo
        export {ENV_VAR}=/path/to/KernelBench-repo
  - the Hugging Face dataset's parquet files (columns code, level, name, problem_id; needs pyarrow:
    pip install 'cuda_gym[data]'):
        huggingface-cli download --repo-type dataset ScalingIntelligence/KernelBench --local-dir /path/to/kernelbench-hf
        export {ENV_VAR}=/path/to/kernelbench-hf"""


class DataNotFoundError(FileNotFoundError):
    """A dataset-backed suite has no data; the message says how to provide it."""


def resolve_data_path(data_path: str | os.PathLike | None, env_var: str, help_text: str, what: str) -> Path:
    """`data_path`, else `$env_var`, as an existing resolved path; else DataNotFoundError(help_text)."""
    raw = data_path if data_path not in (None, "") else os.environ.get(env_var)
    if not raw:
        raise DataNotFoundError(f"no {what} data: neither data_path nor ${env_var} is set.\n{help_text}")
    path = Path(raw).expanduser().resolve()
    if not path.exists():
        source = "data_path" if data_path not in (None, "") else f"${env_var}"
        raise DataNotFoundError(f"{what} data path {str(path)!r} (from {source}) does not exist.\n{help_text}")
    return path


def change_stamp(path: Path) -> int:
    """Cheap fingerprint so an edited file or folder is reloaded (the cache is keyed by path + stamp)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def read_parquet_rows(path: Path, columns: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Rows of one parquet file as dicts (pyarrow is an optional dependency: `cuda_gym[data]`)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(
            f"reading {path.name} needs pyarrow, which is not installed: pip install 'cuda_gym[data]' "
            "(or pip install pyarrow)"
        ) from None
    table = pq.read_table(path)
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table.to_pylist()


# --------------------------------------------------------------------------------------- layouts
def _folder_root(path: Path) -> Path | None:
    """The folder holding `level<n>/` subfolders (the checkout's `KernelBench/` or the path itself)."""
    for candidate in (path / "KernelBench", path):
        if candidate.is_dir() and any(_LEVEL_DIR.match(p.name) and p.is_dir() for p in candidate.iterdir()):
            return candidate
    return None


def _tasks_from_folder(root: Path) -> list[Task]:
    tasks = []
    for level_dir in sorted(root.iterdir()):
        match = _LEVEL_DIR.match(level_dir.name)
        if not match or not level_dir.is_dir():
            continue
        level = int(match.group(1))
        for file in sorted(level_dir.glob("*.py")):
            if file.name == "__init__.py":
                continue
            task = _make_task(file.read_text(encoding="utf-8"), level, file.stem, str(file))
            if task is not None:
                tasks.append(task)
    return tasks


def _name_from_row(row: dict[str, Any], index: int) -> str:
    name = str(row.get("name") or "").strip()
    name = name[:-3] if name.endswith(".py") else name
    name = re.sub(r"[\s/\\]+", "_", name)
    problem_id = row.get("problem_id")
    if problem_id is not None and not re.match(rf"^{int(problem_id)}_", name):
        name = f"{int(problem_id)}_{name}" if name else str(int(problem_id))
    return name or f"row{index}"


def _tasks_from_parquet(files: list[Path]) -> list[Task]:
    tasks = []
    for file in files:
        rows = read_parquet_rows(file, ("code", "level", "name", "problem_id"))
        file_level = _LEVEL_FILE.search(file.stem) or _LEVEL_FILE.search(file.parent.name)
        for index, row in enumerate(rows):
            if not row.get("code"):
                continue
            level = row.get("level")
            if level is None:
                if file_level is None:
                    warnings.warn(f"{file.name} row {index}: no level column and no level in the file name; skipped")
                    continue
                level = int(file_level.group(1))
            task = _make_task(row["code"], int(level), _name_from_row(row, index), f"{file.name} row {index}")
            if task is not None:
                tasks.append(task)
    return tasks


def _make_task(source: str, level: int, name: str, where: str) -> Task | None:
    try:
        task = task_from_source(source, task_id=f"{SUITE}/L{level}/{name}", level=level, name=name)
    except TaskFormatError as exc:
        warnings.warn(f"kernelbench: skipped {where}: {exc}")
        return None
    return task


@functools.lru_cache(maxsize=16)
def _load_cached(resolved: str, stamp: int) -> tuple[Task, ...]:
    path = Path(resolved)
    if path.is_file():
        if path.suffix != ".parquet":
            raise DataNotFoundError(f"{resolved} is a file but not a .parquet file.\n{KERNELBENCH_HELP}")
        tasks = _tasks_from_parquet([path])
    else:
        root = _folder_root(path)
        if root is not None:
            tasks = _tasks_from_folder(root)
        else:
            files = sorted(path.rglob("*.parquet"))
            if not files:
                raise DataNotFoundError(
                    f"{resolved} holds neither KernelBench/level<n>/ folders, level<n>/ folders nor .parquet "
                    f"files.\n{KERNELBENCH_HELP}"
                )
            tasks = _tasks_from_parquet(files)
    seen: dict[str, Task] = {}
    for task in tasks:
        if task.id in seen:
            warnings.warn(f"kernelbench: duplicate task id {task.id}; keeping the first")
            continue
        seen[task.id] = task
    if not seen:
        raise DataNotFoundError(f"no KernelBench task was found under {resolved}.\n{KERNELBENCH_HELP}")
    return tuple(seen.values())


def load_kernelbench(data_path: str | os.PathLike | None = None) -> list[Task]:
    """All KernelBench tasks under `data_path` (or $CUDA_GYM_KERNELBENCH); cached per resolved path."""
    path = resolve_data_path(data_path, ENV_VAR, KERNELBENCH_HELP, "KernelBench")
    return list(_load_cached(str(path), change_stamp(path)))


register_suite(SUITE, load_kernelbench)
