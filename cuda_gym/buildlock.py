"""One build at a time per build directory, and no build stuck behind a killed one.

torch's `cpp_extension` marks a build in progress with a `lock` file in the build directory (its
FileBaton), and any other process that finds the file waits until it is gone. The file has no
owner: a build killed midway (a compile timeout, a killed worker or Ray actor) leaves it behind,
and every later build of the same source then waits forever. A correct candidate judged again
after such a kill got COMPILE_TIMEOUT. cuda_gym's builders therefore hold an advisory lock (flock,
which the kernel drops when its holder dies, however it dies) on `<dir>/cuda_gym_build.flock`
around torch's build. While it is held, a `lock` file can only be a dead build's, so it is removed.
"""
from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

FLOCK_NAME = "cuda_gym_build.flock"
TORCH_BATON = "lock"  # torch.utils.cpp_extension's FileBaton in the build directory


def _open_flock(directory: Path) -> int | None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return os.open(directory / FLOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None  # a directory this process may not write: torch's own handling alone


_local = threading.local()  # .held: the directories this thread holds


@contextmanager
def exclusive_build(build_directory: str | os.PathLike | None) -> Iterator[None]:
    """Hold the build directory's flock for the block, after removing a dead build's `lock` file.
    Re-entrant within a thread (load_kernels' lock inside a worker's wrapped cpp_extension.load: a
    second flock from the same thread would wait for the first forever); other threads, like other
    processes, wait for it. None (a directory torch chooses itself): no lock."""
    if build_directory is None:
        yield
        return
    directory = str(Path(build_directory).absolute())
    held = _local.__dict__.setdefault("held", set())
    fd = None if directory in held else _open_flock(Path(directory))
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.add(directory)
        try:
            (Path(directory) / TORCH_BATON).unlink(missing_ok=True)
        except OSError:
            pass  # not ours to remove; torch reports what follows
        yield
    finally:
        held.discard(directory)
        os.close(fd)  # also releases the flock
