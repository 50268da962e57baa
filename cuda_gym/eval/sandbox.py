"""Confinement applied inside a worker process before any candidate code runs, and the
authentication of what the worker reports.

The worker gets its own session (so the evaluator can kill it with everything it started), no
inherited file descriptors but its channel and its log (a candidate that scribbles on inherited
pipes could otherwise kill the evaluator's fork server or resource tracker), no core dumps, a cap
on file size (stdout/stderr floods), an address-space cap on the CPU backend, a private network
namespace (no network for candidates), a watchdog that kills descendants which left the process
group when the worker is gone, write access only to its scratch directory and
the build caches (Landlock, where the kernel has it), and a scratch working directory. Each
measure that could not be applied is reported, never silently skipped.

`sign()` / `verify()`: every message the worker sends after it has received its job carries a
sequence number and an HMAC under a per-job key that the evaluator sent with the job, so a
candidate that writes well-formed messages to the channel's socket cannot forge a verdict.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import hmac
import json
import os
import resource
import sys
import time
from typing import Any, Iterable, Sequence

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38
_SIGKILL = 9

# Landlock (Linux >= 5.13): syscall numbers are the same on every architecture.
_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_ALL = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/urandom", "/dev/random")
_DEVICE_DIRS = ("/dev/shm", "/dev/dri", "/dev/pts")


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def new_session() -> None:
    try:
        os.setsid()
    except OSError:
        pass  # already a session leader


def die_with_parent() -> bool:
    """SIGKILL this process when its parent exits. A worker's parent is the pool's fork server,
    which exits with the evaluator's process; a worker busy in a candidate's endless loop would
    otherwise run on, orphaned, at full CPU (seen on the 2-core CPU: 37 minutes after its test run
    was killed). Returns False where the kernel refuses it."""
    parent = os.getppid()
    try:
        if _libc().prctl(_PR_SET_PDEATHSIG, _SIGKILL, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    return True


def redirect_output(log_path: str) -> None:
    """Send fd 1 and 2 (Python's and native code's output) to a file the evaluator reads."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def close_inherited_fds(keep: Iterable[int] = ()) -> None:
    """Close every descriptor but 0, 1, 2 and `keep`. A forkserver child inherits the write end
    of the fork server's lifeline pipe and the resource tracker's pipe: garbage written there by
    candidate code would kill the fork server or the tracker and break the NEXT evaluations."""
    keep = {0, 1, 2, *keep}
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 256))
    for fd in fds:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    try:  # nothing here may use the closed descriptors again
        from multiprocessing import forkserver, resource_tracker

        resource_tracker._resource_tracker._fd = None  # type: ignore[attr-defined]
        resource_tracker._resource_tracker._pid = None  # type: ignore[attr-defined]
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    except (ImportError, AttributeError):
        pass


def isolate_network() -> bool:
    """Move this process into an empty network namespace. Returns False where not permitted."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.unshare(_CLONE_NEWNET) == 0
    except (OSError, AttributeError):
        return False


_PR_SET_CHILD_SUBREAPER = 36
_WATCH_INTERVAL_S = 0.25


def process_table(*, zombies: bool = True) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time in clock ticks) of every process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 19 and (zombies or fields[0] != "Z"):
            table[int(name)] = (int(fields[1]), fields[19])
    return table


def _descendants(table: dict[int, tuple[int, str]], roots: Iterable[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _watch(worker: int) -> None:
    """The watchdog's loop: remember the worker's descendants while it lives; once it is gone,
    SIGKILL every remembered one that is still the same process, and their descendants."""
    me = os.getpid()
    seen: dict[int, str] = {}
    while os.getppid() == worker:
        table = process_table()
        for pid in _descendants(table, [worker]) - {me}:
            seen[pid] = table[pid][1]
        time.sleep(_WATCH_INTERVAL_S)
    for _ in range(5):
        table = process_table()
        alive = {pid for pid, start in seen.items() if table.get(pid, (0, None))[1] == start}
        alive |= _descendants(table, alive)
        alive.discard(me)
        if not alive:
            break
        for pid in alive:
            seen.setdefault(pid, table[pid][1])
            try:
                os.kill(pid, _SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)


def contain_children() -> bool:
    """Make sure nothing this worker starts outlives it. The evaluator kills the worker's process
    group; a descendant in another group (ninja runs each compiler in its own; a candidate can
    call setsid()) would survive that. So the worker becomes a child subreaper (orphans of its
    descendants stay in its subtree) and forks a watchdog in a session of its own, which remembers
    the worker's descendants and, when the worker is gone, SIGKILLs those still alive. Processes
    started and orphaned within the last ~0.25 s, or a candidate that kills the watchdog first
    (same user), are not covered. Returns False where the subreaper cannot be set, or where
    CUDA_GYM_SANDBOX_WATCHDOG=0 turns it off."""
    if os.environ.get("CUDA_GYM_SANDBOX_WATCHDOG", "1") == "0":
        return False
    try:
        if _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    worker = os.getpid()
    if os.fork() == 0:
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 1 << 16)  # not the worker's channel: its end must close with the worker
            _watch(worker)
        finally:
            os._exit(0)
    return True


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where Landlock is unavailable."""
    try:
        version = _libc().syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                                  ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def writable_paths(scratch: str) -> list[str]:
    """What a build or eval worker may write: its scratch directory, the kernel cache, the CUDA JIT
    cache, and TORCH_EXTENSIONS_DIR: its candidate's build directory or, in a spare that has no
    job yet, the root of all candidates' build directories (torch's default root if unset)."""
    paths = [scratch]
    if os.environ.get("CUDA_GYM_KERNEL_CACHE"):
        paths.append(os.environ["CUDA_GYM_KERNEL_CACHE"])
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        paths.append(os.environ["TORCH_EXTENSIONS_DIR"])
    else:
        try:
            from torch.utils.cpp_extension import get_default_build_root

            paths.append(get_default_build_root())
        except Exception:  # noqa: BLE001
            pass
    paths.append(os.path.join(os.path.expanduser("~"), ".nv", "ComputeCache"))
    return paths


def restrict_writes(paths: Sequence[str]) -> list[str]:
    """Landlock: from now on this process and its children may create, write, truncate, rename
    or remove files only beneath `paths` (created if missing) and in a few device files; reading
    and executing stay unrestricted. Also points TMPDIR at the first path (compilers write their
    temporaries there). Returns what could not be applied ([] on success)."""
    if os.environ.get("CUDA_GYM_SANDBOX_WRITES", "1") == "0":
        return ["landlock (disabled by CUDA_GYM_SANDBOX_WRITES=0)"]
    if paths:
        os.environ["TMPDIR"] = paths[0]
        import tempfile

        tempfile.tempdir = None
    abi = landlock_abi()
    if abi < 1:
        return ["landlock (not supported by this kernel)"]
    handled = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_ALL
    if abi >= 2:
        handled |= _FS_REFER
    if abi >= 3:
        handled |= _FS_TRUNCATE
    file_rights = handled & (_FS_WRITE_FILE | _FS_TRUNCATE)
    libc = _libc()
    attr = ctypes.c_uint64(handled)  # struct landlock_ruleset_attr { __u64 handled_access_fs; }
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return [f"landlock (create_ruleset errno {ctypes.get_errno()})"]
    failed = []
    try:
        targets = [(p, handled) for p in paths]
        targets += [(p, handled) for p in _DEVICE_DIRS]
        targets += [(p, file_rights) for p in _DEVICE_FILES]
        targets += [(p, file_rights) for p in glob.glob("/dev/nvidia*")]
        # The NVIDIA driver creates some device nodes on first use (nvidia-uvm, nvidia-caps): nodes
        # and directories may be created under /dev, but not written unless listed above.
        targets.append(("/dev", handled & (_FS_MAKE_CHAR | _FS_MAKE_DIR)))
        # Thread names (/proc/self/task/*/comm) and other per-process knobs of this process only.
        targets.append((f"/proc/{os.getpid()}", file_rights))
        for path, rights in targets:
            try:
                if path in paths:
                    os.makedirs(path, exist_ok=True)
            except OSError as exc:
                failed.append(f"landlock: cannot create {path} ({exc.strerror})")
                continue
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = _PathBeneath(rights if os.path.isdir(path) else rights & file_rights, fd)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH,
                                ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                    failed.append(f"landlock rule for {path} (errno {ctypes.get_errno()})")
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return failed + [f"landlock (no_new_privs errno {ctypes.get_errno()})"]
        if libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            return failed + [f"landlock (restrict_self errno {ctypes.get_errno()})"]
    finally:
        os.close(ruleset)
    _keep_torch_headers_read_only()
    return failed


def _keep_torch_headers_read_only() -> None:
    """torch's include directory is read-only here (a candidate could otherwise plant code in
    every later build through a header or the precompiled header). `load_inline(use_pch=False)`
    deletes torch's precompiled header; make that a no-op instead of a PermissionError (GCC
    ignores a precompiled header that does not match the flags). A missing or stale precompiled
    header cannot be (re)built here: prebuild it outside the sandbox to keep the fast path."""
    try:
        from torch.utils import cpp_extension
    except ImportError:
        return
    if hasattr(cpp_extension, "remove_extension_h_precompiler_headers"):
        cpp_extension.remove_extension_h_precompiler_headers = lambda: None


def yield_cpu() -> list[str]:
    """Run this process, and the compilers it starts (they inherit it), only on otherwise idle CPU
    time (SCHED_IDLE; else the lowest nice level): the evaluator's builds overlap its device jobs,
    and a compiler must not take a core from a host-bound model being timed. Returns the names of
    what could not be applied."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return []
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            return ["sched_idle", "nice"]
        return ["sched_idle"]


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


# ------------------------------------------------------------------------- channel authentication
def _canonical(meta: dict) -> bytes:
    """The bytes both sides sign: the meta as it reads back from JSON (tuples become lists, keys
    become strings), with sorted keys."""
    return json.dumps(json.loads(json.dumps(meta, allow_nan=True)), sort_keys=True, allow_nan=True).encode()


def _digest(key: bytes, seq: int, kind: str, meta: dict, arrays: Sequence[Any]) -> str:
    import numpy as np

    mac = hmac.new(key, digestmod=hashlib.sha256)
    mac.update(f"{seq}\0{kind}\0".encode())
    mac.update(_canonical({k: v for k, v in meta.items() if k != "_mac"}))
    for array in arrays:
        array = np.ascontiguousarray(array)
        mac.update(f"\0{array.dtype.name}{list(array.shape)}\0".encode())
        mac.update(memoryview(array.reshape(-1)).cast("B"))  # 1-D: a cast refuses zeros in a 2-D shape
    return mac.hexdigest()


def sign(key: bytes, seq: int, kind: str, meta: dict, arrays: Sequence[Any]) -> dict:
    """`meta` with its sequence number and MAC added (what the worker sends)."""
    meta = dict(meta, _seq=seq)
    meta["_mac"] = _digest(key, seq, kind, meta, arrays)
    return meta


def verify(key: bytes, seq: int, kind: str, meta: dict, arrays: Sequence[Any]) -> bool:
    """Whether a received message carries sequence number `seq` and a valid MAC; removes both."""
    mac = meta.pop("_mac", None)
    if not isinstance(mac, str) or meta.get("_seq") != seq:
        return False
    valid = hmac.compare_digest(mac, _digest(key, seq, kind, meta, arrays))
    meta.pop("_seq", None)
    return valid


_M_PERTURB = -6  # glibc's mallopt parameter: fill every block malloc hands out or takes back


def _libc_mallopt():
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: no M_PERTURB
        return None


# Taken at import, before any candidate code: rebinding it later is a change the tamper check reports.
_mallopt = _libc_mallopt()
_PERTURB_AT_START = int(os.environ.get("MALLOC_PERTURB_", "0") or 0)  # glibc reads it at start-up


def reset_malloc_perturb() -> None:
    """Set glibc's M_PERTURB back to what the worker started with (MALLOC_PERTURB_, else off).
    Called before every paired call: a candidate that turned it on between its own calls made every
    allocation of the paired reference fill its memory (1.5x on the CPU softmax). glibc has no
    getter for its malloc settings, so this one is reset rather than watched; the others are an
    honest limit (docs/evaluation-policy.md)."""
    if _mallopt is not None:
        _mallopt(_M_PERTURB, _PERTURB_AT_START)
