"""The `Task` model: one PyTorch reference program in KernelBench format, plus metadata."""
from __future__ import annotations

import ast
import hashlib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BACKENDS = ("cuda", "cpu")


class TaskFormatError(ValueError):
    """A task source does not follow docs/task-format.md."""


@dataclass(frozen=True)
class Task:
    """A reference program to optimize.

    id: unique, `<suite>/L<level>/<name>` (e.g. `builtin/L2/linear_gelu`).
    source: a KernelBench-format Python file (`class Model`, `get_inputs()`, `get_init_inputs()`).
    sizes: per backend, module-level constants to override before `get_inputs()` is called;
        a backend missing here runs the file's own constants.
    """

    id: str
    level: int
    name: str
    source: str
    tags: tuple[str, ...] = ()
    sizes: dict[str, dict[str, Any]] = field(default_factory=dict)
    description: str = ""

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def sizes_for(self, backend: str) -> dict[str, Any]:
        return dict(self.sizes.get(backend, {}))

    def namespace(self, backend: str) -> dict[str, Any]:
        """Execute the source and apply the backend's sizes; returns the module globals."""
        return load_task_namespace(self.source, self.sizes_for(backend), self.id)


def load_task_namespace(source: str, sizes: dict[str, Any], task_id: str = "<task>") -> dict[str, Any]:
    module = types.ModuleType(f"cuda_gym_task_{abs(hash(task_id))}")
    namespace = module.__dict__
    namespace["__file__"] = f"<task {task_id}>"
    exec(compile(source, f"<task {task_id}>", "exec"), namespace)
    namespace.update(sizes)
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if required not in namespace:
            raise TaskFormatError(f"task {task_id} defines no {required!r} (see docs/task-format.md)")
    return namespace


def _metadata(tree: ast.Module, task_id: str) -> dict[str, Any]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "CUDA_GYM" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError as exc:
                raise TaskFormatError(f"task {task_id}: CUDA_GYM must be a literal dict ({exc})") from None
            if not isinstance(value, dict):
                raise TaskFormatError(f"task {task_id}: CUDA_GYM must be a dict")
            return value
    return {}


def task_from_source(source: str, *, task_id: str, level: int, name: str) -> Task:
    """Build a Task from KernelBench-format source; reads the optional `CUDA_GYM` metadata."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise TaskFormatError(f"task {task_id} is not valid Python: {exc}") from None
    meta = _metadata(tree, task_id)
    sizes = meta.get("sizes", {})
    unknown = set(sizes) - set(BACKENDS)
    if unknown:
        raise TaskFormatError(f"task {task_id}: unknown backends in sizes: {sorted(unknown)}")
    return Task(
        id=task_id,
        level=level,
        name=name,
        source=source,
        tags=tuple(meta.get("tags", ())),
        sizes={k: dict(v) for k, v in sizes.items()},
        description=(ast.get_docstring(tree) or "").strip().splitlines()[0] if ast.get_docstring(tree) else "",
    )


def task_from_file(path: str | Path, *, suite: str, level: int) -> Task:
    path = Path(path)
    return task_from_source(
        path.read_text(encoding="utf-8"), task_id=f"{suite}/L{level}/{path.stem}", level=level, name=path.stem
    )
