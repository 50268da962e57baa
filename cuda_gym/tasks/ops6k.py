"""The `ops6k` suite: CUDA Agent's synthesized training operators (CUDA-Agent-Ops-6K), read locally.

`data_path` (or `CUDA_GYM_OPS6K`) is a parquet file, a JSON-lines file, or a folder searched
recursively for them. Columns used: `code` (a KernelBench-format program), `ops` (the operators it
chains) and `data_source` (e.g. `torch#3`).

- Duplicates: rows whose code is the same (after normalizing line endings and trailing whitespace)
  are dropped; the first occurrence is kept.
- Level: the number of chained operators, taken from `data_source`'s `#<n>` suffix when present,
  else the length of `ops`, at least 1. So `levels=(1,)` gives the single-operator tasks.
- Task id: `ops6k/L<level>/<row>`, where `<row>` is the 0-based, 4-digit index of the row in the
  data (files concatenated in sorted path order, before duplicates are dropped), so ids do not
  shift when duplicates are removed. `Task.tags` holds the operator names.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

from .kernelbench import DataNotFoundError, change_stamp, read_parquet_rows, resolve_data_path
from .suites import register_suite
from .task import Task, TaskFormatError, task_from_source

ENV_VAR = "CUDA_GYM_OPS6K"
SUITE = "ops6k"
_SOURCE_COUNT = re.compile(r"#\s*(\d+)\s*$")

OPS6K_HELP = f"""\
Ops-6K data is not downloaded by cuda_gym; point it at a local copy:
  - pass data_path=... (gym.make("CudaKernel-Ops6K-v1", data_path=...), or load_suite("ops6k", data_path=...)),
  - or set the environment variable {ENV_VAR}=/path/to/data.
Expected: a .parquet (needs pyarrow: pip install 'cuda_gym[data]') or .jsonl file, or a folder holding
them, with the columns ops, data_source, code. To get the dataset:
    huggingface-cli download --repo-type dataset BytedTsinghua-SIA/CUDA-Agent-Ops-6K --local-dir /path/to/ops6k
    export {ENV_VAR}=/path/to/ops6k"""


def parse_ops(value: Any) -> list[str]:
    """`ops` as a list of names; accepts a list, a JSON / Python list literal, or a comma list."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    if hasattr(value, "tolist"):  # numpy array from some parquet readers
        return parse_ops(value.tolist())
    text = str(value).strip()
    if not text:
        return []
    if text[0] in "[(":
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(parsed, (list, tuple)):
                return parse_ops(list(parsed))
        text = text.strip("[]()")
    return [part.strip().strip("'\"") for part in text.split(",") if part.strip().strip("'\"")]


def op_count(row: dict[str, Any], ops: list[str]) -> int:
    match = _SOURCE_COUNT.search(str(row.get("data_source") or ""))
    if match:
        return max(1, int(match.group(1)))
    return max(1, len(ops))


def code_key(code: str) -> str:
    """Content hash used to drop duplicate rows (line endings and trailing whitespace normalized)."""
    lines = [line.rstrip() for line in code.replace("\r\n", "\n").replace("\r", "\n").strip().split("\n")]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _data_files(path: Path) -> list[Path]:
    if path.is_file():
        if path.suffix not in (".parquet", ".jsonl", ".json"):
            raise DataNotFoundError(f"{path} is not a .parquet or .jsonl file.\n{OPS6K_HELP}")
        return [path]
    files = sorted(p for p in path.rglob("*") if p.suffix in (".parquet", ".jsonl") and p.is_file())
    if not files:
        raise DataNotFoundError(f"{path} holds no .parquet or .jsonl file.\n{OPS6K_HELP}")
    return files


def _read_rows(file: Path) -> list[dict[str, Any]]:
    if file.suffix == ".parquet":
        return read_parquet_rows(file, ("code", "ops", "data_source"))
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".json" and text.lstrip().startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _usable(source: str) -> str | None:
    """Why a row cannot be a task (None if it can): the evaluator needs these three names."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"not valid Python ({exc.msg}, line {exc.lineno})"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    return f"defines no {', '.join(missing)}" if missing else None


@functools.lru_cache(maxsize=8)
def _load_cached(resolved: str, stamp: int) -> tuple[tuple[Task, ...], dict[str, int]]:
    files = _data_files(Path(resolved))
    tasks: list[Task] = []
    seen: set[str] = set()
    stats = {"rows": 0, "duplicates": 0, "skipped": 0}
    skipped: list[str] = []
    index = -1
    for file in files:
        for row in _read_rows(file):
            index += 1
            stats["rows"] += 1
            code = row.get("code")
            if not isinstance(code, str) or not code.strip():
                stats["skipped"] += 1
                continue
            key = code_key(code)
            if key in seen:
                stats["duplicates"] += 1
                continue
            seen.add(key)
            problem = _usable(code)
            if problem:
                stats["skipped"] += 1
                skipped.append(f"row {index} of {file.name}: {problem}")
                continue
            ops = parse_ops(row.get("ops"))
            level = op_count(row, ops)
            name = f"{index:04d}"
            try:
                task = task_from_source(code, task_id=f"{SUITE}/L{level}/{name}", level=level, name=name)
            except TaskFormatError as exc:
                stats["skipped"] += 1
                skipped.append(f"row {index} of {file.name}: {exc}")
                continue
            source = str(row.get("data_source") or "")
            description = f"{' -> '.join(ops) or 'ops unknown'}" + (f" ({source})" if source else "")
            tasks.append(Task(id=task.id, level=level, name=name, source=code, tags=tuple(ops),
                              sizes=task.sizes, description=description))
    if skipped:
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        warnings.warn(f"ops6k: skipped {len(skipped)} unusable row(s): {'; '.join(skipped[:3])}{more}")
    if not tasks:
        raise DataNotFoundError(f"no usable Ops-6K row was found in {resolved}.\n{OPS6K_HELP}")
    return tuple(tasks), stats


def load_ops6k(data_path: str | os.PathLike | None = None) -> list[Task]:
    """Ops-6K tasks from `data_path` (or $CUDA_GYM_OPS6K), duplicates dropped; cached per resolved path."""
    path = resolve_data_path(data_path, ENV_VAR, OPS6K_HELP, "Ops-6K")
    return list(_load_cached(str(path), change_stamp(path))[0])


def ops6k_stats(data_path: str | os.PathLike | None = None) -> dict[str, int]:
    """How many rows were read, dropped as duplicates, and skipped as unusable."""
    path = resolve_data_path(data_path, ENV_VAR, OPS6K_HELP, "Ops-6K")
    return dict(_load_cached(str(path), change_stamp(path))[1])


register_suite(SUITE, load_ops6k)
