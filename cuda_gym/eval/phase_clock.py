"""Where a job's time and device memory go: seconds per named phase and, on CUDA, the allocator's
peaks in each."""
from __future__ import annotations

import time
from typing import Any

import torch

from . import memory

_perf_counter = time.perf_counter


class PhaseClock:
    """Seconds spent in each named phase of a job, in order (`phases`: name -> seconds), and on
    CUDA the most the caching allocator reserved in each (`reserved_gib`) beside the most live
    tensors took (`allocated_gib`; memory scrubs left out): where a job's peak comes from, and
    whether it is tensors or the allocator's cached segments. Each mark resets the allocator's
    peak counters (memory.PeakMeter); the first phase's peaks start at TaskSetup's own reset,
    after the model and the base inputs were made."""

    def __init__(self, device: str = "cpu"):
        self.phases: dict[str, float] = {}
        self.reserved_gib: dict[str, float] = {}
        self.allocated_gib: dict[str, float] = {}
        self._meter = None
        self._cuda = device == "cuda"
        if self._cuda:
            try:
                self._meter = memory.PeakMeter()
            except Exception:  # noqa: BLE001 - a torch without these C functions: no peaks, the job runs
                self._meter = None
        memory.peak_meter = self._meter  # one job per worker process
        self._last = _perf_counter()

    def mark(self, name: str) -> float:
        """Ends the phase `name` now (and its memory peaks); returns its seconds."""
        now = _perf_counter()
        self.phases[name] = now - self._last
        self._last = now
        peaks = self._meter.take() if self._meter is not None else None
        if peaks is not None:
            self.reserved_gib[name], self.allocated_gib[name] = round(peaks[0], 3), round(peaks[1], 3)
        return self.phases[name]

    def memory_meta(self) -> dict[str, Any]:
        """The job's peaks so far (the phases' and the one running now), in GiB, and the phase of
        the reserved peak: {"peak_gib", "peak_allocated_gib", "peak_phase", "phase_peak_gib":
        {phase: [reserved, allocated]}}; {} off CUDA."""
        peaks = self._meter.take() if self._meter is not None else None
        phases = {name: [self.reserved_gib[name], self.allocated_gib[name]] for name in self.reserved_gib}
        if peaks is not None:
            phases["(current)"] = [round(peaks[0], 3), round(peaks[1], 3)]
        if not phases:  # off CUDA, or the C statistics could not be read: the allocator's own query
            return {"peak_gib": round(torch.cuda.max_memory_reserved() / memory.GIB, 3)} if self._cuda else {}
        phase = max(phases, key=lambda name: phases[name][0])
        return {"peak_gib": phases[phase][0], "peak_allocated_gib": max(pair[1] for pair in phases.values()),
                "peak_phase": phase, "phase_peak_gib": phases}

