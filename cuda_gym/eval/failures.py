"""Which error code and message an exception in a worker job gets: the candidate's load, the
candidate's calls (FORBIDDEN where it also changed the process), and the reference's own failures
(TASK_ERROR)."""
from __future__ import annotations

import traceback
from typing import Any

import torch

from . import memory
from .channel import Channel, send_error
from .timed_inputs import InputsChanged


def classify_load_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if ("Error building extension" in text or "CalledProcessError" in text or "ninja" in text.lower()
            or "undefined symbol" in text or "could not be loaded" in text):
        return "COMPILE_ERROR"
    if is_oom(exc):
        return "OUT_OF_MEMORY"
    return "RUNTIME_ERROR"


def is_oom(exc: BaseException) -> bool:
    """Allocation failures: torch's CUDA allocator, a candidate's own cudaMalloc (a CUDA error that
    is not sticky), Python's, and the CPU allocator's (a RuntimeError). Where NVML is unavailable,
    torch's CUDA allocator fails inside its out-of-memory report (an internal assert in
    CUDACachingAllocator.cpp) instead of raising OutOfMemoryError."""
    text = str(exc)
    return (isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)) or "can't allocate memory" in text
            or ("CUDACachingAllocator" in text and "nvmlInit" in text)
            or "CUDA error: out of memory" in text or "cudaErrorMemoryAllocation" in text)


def is_cuda_error(exc: BaseException) -> bool:
    """A CUDA error (illegal address, trap, launch failure): sticky, so the process's CUDA state can
    no longer be queried, and the tamper check must not read it as tampering."""
    return "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError"


def reference_failed(channel: Channel, exc: BaseException, device: str, plan: Any) -> None:
    """TASK_ERROR for an exception the reference (trusted task code) raised: out of memory, with
    the numbers, or what it raised."""
    message = (memory.out_of_memory_message(device, plan, "the reference") if is_oom(exc)
               else f"the reference failed: {type(exc).__name__}: {exc}")
    send_error(channel, "TASK_ERROR", message, traceback=traceback.format_exc(limit=8))


def candidate_failure(exc: BaseException, tamper: Any, device: str, plan: Any, during: str) -> tuple[str, str]:
    """(error code, message) for an exception raised by candidate code."""
    changes = [] if is_cuda_error(exc) else tamper.changes()
    if changes:
        return "FORBIDDEN", (f"{during} raised {type(exc).__name__}: {exc} (the candidate changed the evaluation "
                             f"process: {', '.join(changes)})")
    if isinstance(exc, InputsChanged):
        return "INCORRECT", str(exc)
    if is_oom(exc):
        return "OUT_OF_MEMORY", memory.out_of_memory_message(device, plan, f"the candidate ({during})")
    return "RUNTIME_ERROR", f"{during} raised {type(exc).__name__}: {exc}"

