"""What is optimized: the Task model and named suites."""
from .suites import get_task, load_suite, register_suite, solution_path, suite_names
from .task import BACKENDS, Task, TaskFormatError, task_from_file, task_from_source

__all__ = [
    "BACKENDS", "Task", "TaskFormatError", "get_task", "load_suite", "register_suite",
    "solution_path", "suite_names", "task_from_file", "task_from_source",
]
from . import kernelbench, ops6k, synth  # noqa: E402,F401  registers the "kernelbench", "ops6k" and "synth" suites
