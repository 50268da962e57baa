"""How every `cuda-gym` subcommand takes lists of task ids and levels: `--tasks a,b`, `--tasks a b` and
`--tasks "a, b"` mean the same, and so do the same forms of `--levels`. One parser helper, so the
commands cannot drift apart.
"""
from __future__ import annotations

import argparse
import re
from typing import Iterable

_SEPARATORS = re.compile(r"[,\s]+")


def split_list(values: str | Iterable[str] | None) -> list[str]:
    """The items of `values` (one string or several), split at commas and whitespace, empty items
    dropped, each item once, in the order given."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    items = (item for value in values for item in _SEPARATORS.split(value) if item)
    return list(dict.fromkeys(items))


def split_levels(values: str | Iterable[str] | None) -> list[int]:
    """Levels as integers, split like `split_list`; a non-integer raises ValueError naming it."""
    levels = []
    for item in split_list(values):
        try:
            levels.append(int(item))
        except ValueError:
            raise ValueError(f"levels are integers, got {item!r}") from None
    return levels


class _ExtendSplit(argparse.Action):
    """Appends the split items of every occurrence, so the option may also be repeated."""

    def __init__(self, *args, levels: bool = False, **kwargs):
        self.levels = levels
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            items = split_levels(values) if self.levels else split_list(values)
        except ValueError as exc:
            parser.error(f"{option_string}: {exc}")
        merged = list(getattr(namespace, self.dest, None) or []) + items
        setattr(namespace, self.dest, list(dict.fromkeys(merged)))


def add_task_options(parser, *, tasks_help: str = "task ids, e.g. builtin/L1/gelu,builtin/L2/linear_gelu",
                     levels_help: str = "only these levels, e.g. 1,2", tasks_group=None, tasks: bool = True) -> None:
    """Add `--tasks` and `--levels` (commas or spaces; repeatable) to `parser`, with `--task` and
    `--level` accepted as hidden aliases. `tasks_group` (a mutually exclusive group) takes `--tasks`
    where a command lets a suite or a task list be named but not both; `tasks=False` adds the levels
    only. The parsed values are lists (`args.tasks`: str, `args.levels`: int), or None when not given."""
    if tasks:
        target = tasks_group if tasks_group is not None else parser
        target.add_argument("--tasks", nargs="+", action=_ExtendSplit, metavar="TASK_ID", help=tasks_help)
        target.add_argument("--task", nargs="+", action=_ExtendSplit, dest="tasks", help=argparse.SUPPRESS)
    parser.add_argument("--levels", nargs="+", action=_ExtendSplit, levels=True, metavar="LEVEL", help=levels_help)
    parser.add_argument("--level", nargs="+", action=_ExtendSplit, levels=True, dest="levels", help=argparse.SUPPRESS)
