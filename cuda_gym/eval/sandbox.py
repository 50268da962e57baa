"""Confinement applied inside a worker process before any candidate code runs.

The worker gets its own session (so the evaluator can kill it with everything it started), no
core dumps, a cap on file size (stdout/stderr floods), an address-space cap on the CPU backend, a
private network namespace where the OS allows it (no network for candidates), and a scratch
working directory. Each measure that could not be applied is reported, never silently skipped.
"""
from __future__ import annotations

import ctypes
import os
import resource
import sys

_CLONE_NEWNET = 0x40000000


def new_session() -> None:
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader


def redirect_output(log_path: str) -> None:
    """Send fd 1 and 2 (Python's and native code's output) to a file the evaluator reads."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def isolate_network() -> bool:
    """Move this process into an empty network namespace. Returns False where not permitted."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(_CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


def apply_limits(*, max_file_mb: float, address_space_gb: float | None) -> list[str]:
    """Apply resource limits; returns the names of limits that could not be applied."""
    failed = []
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, int(max_file_mb * 2**20))]
    if address_space_gb:
        limits.append((resource.RLIMIT_AS, int(address_space_gb * 2**30)))
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            failed.append(str(which))
    return failed
