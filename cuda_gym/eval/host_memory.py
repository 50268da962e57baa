"""Whether a CPU tensor's bytes are plain process memory, read from /proc/self/maps and smaps.

The judge reads a candidate's CPU outputs after the timed call returned. Memory whose pages are
filled when first touched (PROT_NONE pages opened by a SIGSEGV handler, pages registered with
userfaultfd and answered by a thread, a shared mapping that another mapping or process writes,
a file whose pages are read in at fault time) lets a forward return at once and do its work
inside the judge's reads, after the clock stopped. `memory_problem` promises: where it answers
None, every byte of [address, address + length) lies in mappings that are private, readable and
writable, anonymous (no file: the heap, an anonymous mmap, a named anonymous region), and not
registered with userfaultfd (no 'um', 'uw', 'ui' VmFlags, nor the 'ur'/'uf' that newer kernels
show), so a read of them cannot run code of the candidate's. It reads only the kernel's tables,
never the bytes themselves (a read would fault a lazy page in).

It does not promise: that the bytes were written by the call (a side thread may still be writing
them; other checks look at values), nor anything about memory that the process's state can
change after the check (a handler installed later is the tamper check's business), nor anything
about GPU memory. The answer holds for the moment it was read.
"""
from __future__ import annotations

import os
from typing import Any, Iterator

# Why a range is not plain memory (the digest records the index: output_digest.NOT_PLAIN_MEMORY).
REASONS = (
    "its bytes are not all inside the process's mappings",
    "it is mapped without both read and write access (a page fault can run code that fills it)",
    "it is a shared mapping (another mapping or process can fill it later)",
    "it is mapped from a file (its pages are read in when first touched)",
    "it is registered with userfaultfd (a page fault is answered by code that fills it)",
    "/proc/self/smaps could not be read",
)
NOT_MAPPED, NOT_READ_WRITE, SHARED, FILE_BACKED, USERFAULTFD, UNREADABLE = range(len(REASONS))
# VmFlags of a userfaultfd registration: missing, write-protect and minor-fault tracking ('um',
# 'uw', 'ui' in Documentation/filesystems/proc.rst); 'ur' (read-write protect) and 'uf' (any
# registration) are the names proposed for newer kernels.
USERFAULTFD_FLAGS = frozenset({"um", "uw", "ui", "ur", "uf"})
_SMAPS = "/proc/self/smaps"
_READ_BYTES = 1024  # about one mapping's record per read


def _is_anonymous(path: str) -> bool:
    return path in ("", "[heap]") or path.startswith("[anon:")


def _smaps_lines() -> Iterator[bytes]:
    """The lines of /proc/self/smaps, read a little at a time: the kernel builds a mapping's record
    (a walk of its page tables, the costly part) only when a read reaches it."""
    fd = os.open(_SMAPS, os.O_RDONLY | os.O_CLOEXEC)
    try:
        rest = b""
        while True:
            chunk = os.read(fd, _READ_BYTES)
            if not chunk:
                if rest:
                    yield rest
                return
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            yield from lines
    finally:
        os.close(fd)


def memory_problem(address: int, length: int) -> tuple[int, str] | None:
    """None when [address, address + length) is plain memory (the module docstring), else (an index
    into REASONS, the permissions of the offending mapping: '---s', 'r--p', ... or '' where none).
    /proc/self/smaps is read in address order and left once the mapping that ends the range has
    shown its VmFlags."""
    if length <= 0:
        return None
    end = address + length
    covered = address  # every byte below this is in a mapping checked already
    perms, inside = "", False  # the current record's permissions; whether it overlaps the range
    try:
        for line in _smaps_lines():
            first, _, rest = line.partition(b" ")
            if first.endswith(b":"):  # a field of the current mapping's record
                if inside and first == b"VmFlags:":
                    if not USERFAULTFD_FLAGS.isdisjoint(rest.decode().split()):
                        return USERFAULTFD, perms
                    if covered >= end:
                        return None
                continue
            if not first:
                continue
            low, _, high = first.partition(b"-")
            start, stop = int(low, 16), int(high, 16)
            inside = stop > covered
            if not inside:
                continue
            if start > covered:  # a gap: part of the range is in no mapping
                return NOT_MAPPED, ""
            fields = rest.split(None, 4)  # perms, offset, device, inode, path
            perms = fields[0].decode()
            path = fields[4].strip().decode(errors="replace") if len(fields) > 4 else ""
            if perms[0] != "r" or perms[1] != "w":
                return NOT_READ_WRITE, perms
            if perms[3] != "p":
                return SHARED, perms
            if not _is_anonymous(path):
                return FILE_BACKED, perms
            covered = stop
    except (OSError, ValueError, IndexError):
        return UNREADABLE, ""
    return (NOT_MAPPED, "") if covered < end else (UNREADABLE, perms)


def tensor_memory_problem(tensor: Any) -> tuple[int, str] | None:
    """`memory_problem` over the whole storage of a strided CPU tensor (every byte any view of it
    can read); None for tensors elsewhere, without storage, or with none of it."""
    import torch

    if tensor.device.type != "cpu" or tensor.layout is not torch.strided:
        return None
    storage = tensor.untyped_storage()
    return memory_problem(storage.data_ptr(), storage.nbytes())
