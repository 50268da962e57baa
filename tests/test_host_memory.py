"""host_memory tells plain process memory from memory a page fault can fill, and the output digest
fails an output on the latter before reading any of its values."""
from __future__ import annotations

import ctypes
import mmap

import numpy as np
import pytest
import torch

from cuda_gym.eval import EvalConfig, host_memory, output_digest

PAGE = mmap.PAGESIZE
PROT_NONE = 0  # not in Python's mmap module
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


@pytest.fixture
def protected_pages():
    """Two private anonymous pages mapped PROT_NONE (a read would fault)."""
    address = _libc.mmap(None, 2 * PAGE, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert address not in (None, ctypes.c_void_p(-1).value)
    yield address
    _libc.munmap(address, 2 * PAGE)


def _address_of(buffer: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


def test_ordinary_tensors_are_plain():
    for tensor in (torch.randn(10), torch.randn(1 << 22), torch.randn(300, 300)[:, 7], torch.zeros(0)):
        assert host_memory.tensor_memory_problem(tensor) is None
    private = mmap.mmap(-1, 4 * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        assert host_memory.memory_problem(_address_of(private), 4 * PAGE) is None
    finally:
        del private  # the buffer export ends with the ctypes object; nothing else holds it


def test_a_protected_mapping_is_rejected(protected_pages):
    assert host_memory.memory_problem(protected_pages, PAGE) == (host_memory.NOT_READ_WRITE, "---p")


def test_a_read_only_mapping_is_rejected(protected_pages):
    assert ctypes.CDLL(None).mprotect(ctypes.c_void_p(protected_pages), PAGE, mmap.PROT_READ) == 0
    assert host_memory.memory_problem(protected_pages, PAGE) == (host_memory.NOT_READ_WRITE, "r--p")
    # Only the second page is writable now: a range across both is still rejected.
    assert host_memory.memory_problem(protected_pages + PAGE - 8, 16)[0] == host_memory.NOT_READ_WRITE


def test_a_shared_mapping_is_rejected():
    shared = mmap.mmap(-1, 2 * PAGE, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    address = _address_of(shared)
    assert host_memory.memory_problem(address, 2 * PAGE) == (host_memory.SHARED, "rw-s")
    tensor = torch.frombuffer((ctypes.c_float * (2 * PAGE // 4)).from_address(address), dtype=torch.float32)
    assert host_memory.tensor_memory_problem(tensor) == (host_memory.SHARED, "rw-s")


def test_a_file_mapping_is_rejected(tmp_path):
    path = tmp_path / "data"
    path.write_bytes(b"\0" * PAGE)
    with open(path, "r+b") as file:
        mapped = mmap.mmap(file.fileno(), PAGE, flags=mmap.MAP_PRIVATE)
    assert host_memory.memory_problem(_address_of(mapped), PAGE) == (host_memory.FILE_BACKED, "rw-p")


def test_a_range_outside_every_mapping_is_rejected(protected_pages):
    _libc.munmap(protected_pages + PAGE, PAGE)  # a hole right after the first page
    assert host_memory.memory_problem(protected_pages + PAGE, 8)[0] == host_memory.NOT_MAPPED
    assert host_memory.memory_problem(8, 8)[0] == host_memory.NOT_MAPPED


def test_userfaultfd_flags_are_the_kernel_names():
    assert {"um", "uw", "ui"} <= host_memory.USERFAULTFD_FLAGS


def test_the_digest_fails_a_lazy_output_without_reading_it(protected_pages):
    # A read of this tensor's memory would kill the process (SIGSEGV): the digest must not read it.
    lazy = torch.frombuffer((ctypes.c_float * (PAGE // 4)).from_address(protected_pages), dtype=torch.float32)
    digest = output_digest.DigestMaker(7)
    got = digest([lazy], 0)
    assert got[0] == output_digest.NOT_PLAIN_MEMORY
    want = digest([torch.ones(PAGE // 4)], 0)
    failure = output_digest.mismatch(got, want, EvalConfig())
    assert failure.startswith("output: output memory is not plain: it is mapped without both read and write")
    assert "(mapping ---p)" in failure
    # A record of a lazy output among others keeps the digest's layout readable.
    both = digest([torch.ones(3), lazy], 0)
    assert len(output_digest.split(np.asarray(both))) == 2
