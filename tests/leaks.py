"""Finding processes that outlived the evaluation that started them (tests only; reads /proc).

Importing this module tags the test process's environment (before any evaluator starts its fork
server), so every process descended from this test session carries the tag in /proc/PID/environ,
whatever its session, process group or working directory; other users of the machine do not.
"""
from __future__ import annotations

import os
import time
import uuid

from cuda_gym.eval.sandbox import process_table

TAG = f"CUDA_GYM_TEST_SESSION={os.environ.setdefault('CUDA_GYM_TEST_SESSION', uuid.uuid4().hex)}".encode()


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks), zombies left out."""
    return process_table(zombies=False)


def _describe(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")[:120]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} {cmdline!r} cwd={cwd}"


def snapshot() -> set[tuple[int, str]]:
    return {(pid, start) for pid, (_, start) in _processes().items()}


def leaked(before: set[tuple[int, str]], cache_dir: str, grace_s: float = 5.0) -> list[str]:
    """Processes started since `before` that are not descendants of this (test) process but were
    started by it (they carry the session tag) or run in `cache_dir`. Live workers and their
    helpers are our descendants; an orphan is a leak. Waits up to `grace_s` for killed processes
    to disappear."""
    me = os.getpid()
    cache_dir = os.path.realpath(cache_dir)
    deadline = time.monotonic() + grace_s
    while True:
        table = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        mine, todo = {me}, [me]
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in mine:
                    mine.add(child)
                    todo.append(child)
        found = []
        for pid, (_, start) in table.items():
            if (pid, start) in before or pid in mine:
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    environ = handle.read().split(b"\0")
                cwd = os.path.realpath(os.readlink(f"/proc/{pid}/cwd"))
            except OSError:
                continue
            if TAG in environ or cwd.startswith(cache_dir):
                found.append(_describe(pid))
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.25)
