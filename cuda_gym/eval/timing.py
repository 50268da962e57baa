"""Timing a callable inside a worker: warm-up, L2 flush, rotating inputs, many repeats, all streams.

The clock functions are captured when this module is imported, before any candidate code runs in
the process, so a candidate that rebinds `time.perf_counter_ns` or `torch.cuda.synchronize` does not
change what measures it. Every repeat is timed two ways on CUDA: CUDA events on the current stream,
and the host clock around a device-wide synchronize (covers work on every stream). When the two
disagree by more than launch overhead, work escaped the current stream and the host-clock time
is the one reported.
"""
from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Sequence

import torch

from .result import TimingStats

_perf_counter_ns = time.perf_counter_ns
_cuda_synchronize = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event
_no_grad = torch.no_grad
_mm = torch.mm

L2_FLUSH_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2
SPIN_UP_MS = 25.0  # busy GPU time right before the timed repeats
UNTRACKED_WORK_FLAG = "work_outside_current_stream"


def _stats(samples_ms: Sequence[float], method: str) -> TimingStats:
    ordered = sorted(samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return TimingStats(
        median_ms=statistics.median(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        iqr_ms=quartiles[2] - quartiles[0],
        reps=len(ordered),
        method=method,
    )


class Timer:
    """Times `fn(*inputs)` over rotating input sets; returns stats, flags and output snapshots."""

    def __init__(self, device: str, *, warmup_reps: int, reps: int, min_reps: int, budget_s: float,
                 l2_flush: bool):
        self.device = device
        self.warmup_reps = warmup_reps
        self.reps = reps
        self.min_reps = min_reps
        self.budget_ns = int(budget_s * 1e9)
        self._flush_buffer = None
        if device == "cuda" and l2_flush:
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

    def _sync(self) -> None:
        if self.device == "cuda":
            _cuda_synchronize()

    def _spin_up(self) -> None:
        """Keep the GPU busy for SPIN_UP_MS right before the timed repeats. A GPU that idled (as it
        does while a worker sets up) runs its first milliseconds of work at low clocks, and a few
        warm-up calls of a short kernel do not last long enough to raise them. Measured on the
        H200: it did not narrow the 30-39% spread of a 0.2 ms kernel's median between fresh
        workers (benchmarks/results/evaluation_speed_cuda_h200_2026-11-29.json); it costs 25 ms
        per timed callable."""
        if self._flush_buffer is None:
            return
        n = 2048
        a = self._flush_buffer[: n * n].view(n, n)
        out = self._flush_buffer[n * n: 2 * n * n].view(n, n)
        started = _perf_counter_ns()
        while _perf_counter_ns() - started < SPIN_UP_MS * 1e6:
            for _ in range(4):
                _mm(a, a, out=out)
            _cuda_synchronize()

    def run(self, fn: Callable[..., Any], live_inputs: Sequence[Any], load_set: Callable[[int], None],
            sets: int, checksum: Callable[[Any], list[float]], *, audit: Callable[[], Any] | None = None,
            cover_sets: bool = True) -> tuple[TimingStats, list[str], list[list[float]]]:
        """Time `fn(*live_inputs)`; before each repeat `load_set(k)` copies input set k (rotating)
        into the live input tensors, so the addresses stay and the values change: a result cached
        by address is stale. Returns (stats, flags, per-repeat [set index, *checksum(output)]),
        the checksum taken right after the timed call, so late or skipped work is caught.

        Warm-up calls load sets `reps, reps+1, ...` (mod `sets`), so with `sets >= reps + warmup`
        no call sees the inputs of another. `audit()`, when given, returns a context manager (the
        op recorder) under which every warm-up call and a secret random quarter of the repeats run;
        those repeats are checksummed but not timed. `cover_sets=False`: stop on the budget once
        `min_reps` repeats are timed, without first using every set."""
        flags: list[str] = []
        chooser = random.SystemRandom()
        with _no_grad():
            for index in range(self.warmup_reps):
                load_set((self.reps + index) % sets)
                if audit is not None:
                    with audit():
                        fn(*live_inputs)
                else:
                    fn(*live_inputs)
            self._sync()
            self._spin_up()
            event_ms: list[float] = []
            wall_ms: list[float] = []
            sums: list[list[float]] = []
            started = _perf_counter_ns()
            for rep in range(self.reps):
                which = rep % sets
                load_set(which)
                if self._flush_buffer is not None:
                    self._flush_buffer.zero_()
                self._sync()
                if (audit is not None and chooser.random() < 0.25
                        and self.reps - rep > self.min_reps - len(wall_ms)):
                    with audit():
                        output = fn(*live_inputs)
                    self._sync()
                    sums.append([float(which), *checksum(output)])
                    del output
                    continue
                if self.device == "cuda":
                    start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
                    t0 = _perf_counter_ns()
                    start.record()
                    output = fn(*live_inputs)
                    end.record()
                    _cuda_synchronize()
                    t1 = _perf_counter_ns()
                    event_ms.append(start.elapsed_time(end))
                else:
                    t0 = _perf_counter_ns()
                    output = fn(*live_inputs)
                    t1 = _perf_counter_ns()
                wall_ms.append((t1 - t0) / 1e6)
                sums.append([float(which), *checksum(output)])
                del output
                covered = rep + 1 >= sets if cover_sets else True
                if len(wall_ms) >= self.min_reps and covered and _perf_counter_ns() - started > self.budget_ns:
                    break
        if self.device != "cuda":
            return _stats(wall_ms, "wall"), flags, sums
        event_stats = _stats(event_ms, "cuda_event")
        wall_stats = _stats(wall_ms, "wall+device_sync")
        if wall_stats.median_ms - event_stats.median_ms > 0.05 + 0.25 * event_stats.median_ms:
            flags.append(UNTRACKED_WORK_FLAG)
            return wall_stats, flags, sums
        return event_stats, flags, sums
