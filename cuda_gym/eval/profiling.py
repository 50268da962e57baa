"""One forward under the CUDA profiler: its device events and the table of kernels it ran (launches
and device time). Only after a worker's timing: once the profiler has run in a process, kernel
launches there cost more host time (docs/decisions/001-no-profiler-before-timing.md)."""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from .task_setup import TaskSetup, clone
from .worker_device import sync


def profile_forward(model: Any, setup: TaskSetup) -> list[dict[str, Any]]:
    """One forward of trusted code (a baseline) under the CUDA profiler: `kernel_profile`'s table."""
    return kernel_profile(profiled_device_events(model, setup, contextlib.nullcontext()))


def profiled_device_events(model: Any, setup: TaskSetup, around: Any) -> list[Any]:
    """The device events of one forward on input set 0 under the CUDA profiler, inside `around`
    (a context manager: the candidate's op-recorder audit, or nothing for trusted code)."""
    inputs = [clone(v) for v in setup.timing_sets[0]]
    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    with profiler, around:
        with torch.no_grad():
            model(*inputs)
        sync("cuda")
    return [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_profile(device_events: list[Any], limit: int = 50) -> list[dict[str, Any]]:
    """Per device kernel: launches and summed device time (us) in the profiled forward, largest first."""
    totals: dict[str, list[float]] = {}
    for event in device_events:
        entry = totals.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += float(event.time_range.elapsed_us())
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:limit]
    return [{"name": name, "count": int(count), "total_us": round(total, 3)} for name, (count, total) in ranked]

