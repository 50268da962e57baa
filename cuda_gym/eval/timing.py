"""Timing a callable inside a worker: warm-up, L2 flush, rotating inputs, many repeats, all streams.

The clock functions are captured when this module is imported, before any candidate code runs in
the process, so a candidate that rebinds `time.perf_counter_ns` or `torch.cuda.synchronize` does not
change what measures it.

On CUDA each repeat comes after an L2 flush and a device-wide sync, and the repeats come in two
phases (held repeats can be turned off with CUDA_GYM_TIMER_HOLD=0; then every repeat is open):

- Open repeats (the first quarter): CUDA events on the current stream, and the host clock around
  a device-wide synchronize (covers work on every stream). When the two disagree by more than
  launch overhead, work escaped the current stream and the host-clock time is the one reported.
  The host's time to issue the call (start event to return) is recorded too.
- Held repeats (the rest): a hold kernel that fills every SM (all threads and shared memory, so
  no block of any stream can start beside it) runs for 3x the open repeats' median host issue
  time (0.05-2 ms), then the start event; the candidate's call is issued meanwhile, so the events time
  the device work alone. A held repeat counts max(device time, host issue time): what one call
  costs when calls are issued back to back. An open repeat instead adds the host's issue time to
  the device time, and that differs from process to process
  (docs/decisions/006-held-cuda-timing.md).

The held median is reported unless one of these holds, and then the open measurement is, with a
flag saying why:
- work escaped: the device-wide sync after a held repeat's end event waited for more than launch
  overhead (work on other streams that ran after the window), or the open repeats showed it;
- the call's host time outlasted the hold: a call that waits for the GPU would otherwise be
  charged the hold, and one that issues work for longer than 2 ms is not held throughout;
- the held median is below what the open repeats allow: their median less their host issue time
  and launch latency, but never less than half their median, less 2%. This catches work done
  during the hold that the held window does not see (copies by the copy engines on another
  stream, say). A candidate can tell open repeats from held ones (by counting its calls, or by
  querying its stream); one that stalls the host only in open repeats, to inflate that credit,
  gains at most 2x over the open time, and only for work done while the SMs are held.

Known limit: host work that the call leaves running in another thread (not waited for) is
untimed while it overlaps the hold; its results must still land before the output is checksummed,
which follows a device-wide sync, and the tail check flags a late device tail.
"""
from __future__ import annotations

import gc
import hashlib
import os
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .config import held_timing_enabled
from .result import TimingStats

_perf_counter_ns = time.perf_counter_ns
_cuda_synchronize = torch.cuda.synchronize
_CudaEvent = torch.cuda.Event
_no_grad = torch.no_grad
_current_stream = torch.cuda.current_stream
_event_synchronize = torch.cuda.Event.synchronize

L2_FLUSH_BYTES = 256 * 2**20  # > 4x the H200's 60 MB L2
UNTRACKED_WORK_FLAG = "work_outside_current_stream"
HELD_DISAGREES_FLAG = "held_timing_not_used"  # held repeats faster than the open ones allow: open reported
HELD_OUTLASTED_FLAG = "call_outlasted_hold"  # the call's host time outlasted the hold: open reported
LAUNCH_LATENCY_MS = 0.01  # allowance for the launch latency an open repeat adds over a held one
OPEN_SHARE = 0.25  # the first quarter of the timed repeats are open, the rest held
HOLD_MS = (0.05, 2.0)  # the hold lasts 3x the open repeats' median host issue time, within these bounds

HOLD_SOURCE = r"""
#include <cuda_runtime.h>
#include <cstdint>
// Every block takes 1024 threads and an SM's share of shared memory, launched twice per SM, so while
// it runs no block of any other kernel fits anywhere on the GPU. Thread 0 waits on the global timer.
extern "C" __global__ void __launch_bounds__(1024, 2) cuda_gym_hold(int64_t nanoseconds) {
    extern __shared__ unsigned char reserved[];
    if (threadIdx.x == 0) {
        uint64_t start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < (uint64_t)nanoseconds);
        reserved[0] = 0;
    }
    __syncthreads();
}
extern "C" int cuda_gym_hold_gpu(int64_t nanoseconds, int blocks, int shared_bytes, cudaStream_t stream) {
    cudaError_t status = cudaFuncSetAttribute(cuda_gym_hold, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
    if (status != cudaSuccess) return (int)status;
    cuda_gym_hold<<<blocks, 1024, shared_bytes, stream>>>(nanoseconds);
    return (int)cudaGetLastError();
}
"""
HOLD_LIBRARY_ENV = "CUDA_GYM_HOLD_LIBRARY"  # the built hold library; set by the evaluator for its workers
HOLD_PROTOTYPE = "int cuda_gym_hold_gpu(int64_t nanoseconds, int blocks, int shared_bytes, cudaStream_t stream)"
# (ctypes function, blocks, shared bytes) once prepare_hold() loaded it, before any candidate code;
# False when it is unavailable. Rebinding it later is caught by the tamper check (watched module).
_hold: tuple | bool | None = None


def build_hold_library(directory: Path, capability: tuple[int, int]) -> Path:
    """Compile the hold kernel for a GPU of this compute capability into `directory`, once, and
    return the library's path. Trusted context only (the evaluator's own process), into a directory
    no worker may write: every later worker loads this code before any check is armed, so it must
    not come from a cache a candidate can replace. Raises when nvcc is missing or fails."""
    from torch.utils.cpp_extension import CUDA_HOME

    arch = f"{capability[0]}{capability[1]}"
    digest = hashlib.sha256(f"{HOLD_SOURCE}\0{arch}".encode()).hexdigest()[:16]
    target = Path(directory) / f"hold_{digest}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    source = target.with_suffix(".cu")
    source.write_text(HOLD_SOURCE)
    partial = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    nvcc = str(Path(CUDA_HOME) / "bin" / "nvcc") if CUDA_HOME else "nvcc"
    built = subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-O3",
                            f"-gencode=arch=compute_{arch},code=[sm_{arch},compute_{arch}]", str(source), "-o",
                            str(partial)], capture_output=True, text=True, timeout=300)
    if built.returncode != 0:
        raise RuntimeError(f"nvcc failed on the timer's hold kernel: {built.stderr[-1500:]}")
    os.replace(partial, target)  # whole files only
    return target


def prepare_hold() -> bool:
    """Load the hold kernel ($CUDA_GYM_HOLD_LIBRARY, built by `build_hold_library`); call before any
    candidate code runs. False when held repeats are off, the library is missing or this GPU cannot
    be filled that way: then every repeat is open, still a sound measurement."""
    global _hold
    if _hold is not None:
        return bool(_hold)
    _hold = False
    library_path = os.environ.get(HOLD_LIBRARY_ENV)
    if not held_timing_enabled() or not library_path:
        return False
    try:
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        per_sm = properties.max_threads_per_multi_processor // 1024
        shared = min(properties.shared_memory_per_block_optin,
                     properties.shared_memory_per_multiprocessor // per_sm - 1024)  # 1 KB reserved per block
        if per_sm >= 1 and shared > 0:
            from ..native import KernelLibrary, parse_prototype

            library = KernelLibrary(library_path, [parse_prototype(HOLD_PROTOTYPE)], "cuda")
            _hold = (library.cuda_gym_hold_gpu._cfunc, properties.multi_processor_count * per_sm, shared)
    except Exception:  # noqa: BLE001 - no hold: open repeats only, still a sound measurement
        _hold = False
    return bool(_hold)


def _escaped(extra_ms: float, median_ms: float) -> bool:
    """More time than launch overhead outside the current stream's events: work escaped it."""
    return extra_ms > 0.05 + 0.25 * median_ms


def _stats(samples_ms: Sequence[float], method: str, detail: dict[str, float] | None = None) -> TimingStats:
    ordered = sorted(samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return TimingStats(
        median_ms=statistics.median(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        iqr_ms=quartiles[2] - quartiles[0],
        reps=len(ordered),
        method=method,
        detail=detail or {},
    )


MAX_EXTRA_WARMUPS = 200


_detach = torch.Tensor.detach


def handles(values: Sequence[Any]) -> list[Any]:
    """New tensor objects on the live inputs' storage for one call: the same addresses and values,
    but never the objects the judge loads inputs through, so that whatever a call does to the
    objects it was given (a `__class__` assignment that would run its code inside the judge's own
    tensor calls, `set_`, attributes) stays with them."""
    return [_detach(v) if isinstance(v, torch.Tensor) else v for v in values]


class Timer:
    """Times `fn(*inputs)` over rotating input sets; returns stats, flags and output snapshots."""

    def __init__(self, device: str, *, warmup_reps: int, reps: int, min_reps: int, budget_s: float,
                 l2_flush: bool, warmup_s: float = 0.0):
        self.device = device
        self.warmup_reps = warmup_reps
        self.warmup_ns = int(warmup_s * 1e9)
        self.reps = reps
        self.min_reps = min_reps
        self.budget_ns = int(budget_s * 1e9)
        self._flush_buffer = None
        if device == "cuda" and l2_flush:
            self._flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")

    def _sync(self) -> None:
        if self.device == "cuda":
            _cuda_synchronize()

    def run(self, fn: Callable[..., Any], live_inputs: Sequence[Any], load_set: Callable[[int], None],
            sets: int, checksum: Callable[[Any, int], Any], *, audit: Callable[[], Any] | None = None,
            cover_sets: bool = True) -> tuple[TimingStats, list[str], list[tuple[int, Any]]]:
        """Time `fn(*live_inputs)`; before each repeat `load_set(k)` copies input set k (rotating)
        into the live input tensors, so the addresses stay and the values change: a result cached
        by address is stale. Returns (stats, flags, per-repeat (set index, checksum(output, set
        index))), the checksum taken right after the timed call, so late or skipped work is caught.

        Warm-up calls load sets `reps, reps+1, ...` (mod `sets`), so with `sets >= reps + warmup`
        no call sees the inputs of another. `audit()`, when given, returns a context manager (the
        op recorder) under which every warm-up call and a secret random quarter of the repeats run;
        those repeats are checksummed but not timed. `cover_sets=False`: stop on the budget once
        `min_reps` repeats are timed, without first using every set."""
        chooser = random.SystemRandom()
        hold = _hold if self.device == "cuda" and _hold else None
        checksum = ProbedChecksum(checksum)
        # No cyclic garbage collection inside a timed call: when it runs depends on the process's
        # heap (an eval worker holds far more objects than a baseline worker), so it would time two
        # processes' calls differently. It is off from the repeat's start to its checksum only: with
        # it off across audited calls too, the op recorder's objects piled up and the process
        # crashed (SIGSEGV on the CPU backend).
        collecting = gc.isenabled()
        gc.collect()
        try:
            return self._run(fn, live_inputs, load_set, sets, checksum, audit, cover_sets, chooser, hold, collecting)
        finally:
            if collecting:
                gc.enable()

    def _run(self, fn: Callable[..., Any], live_inputs: Sequence[Any], load_set: Callable[[int], None], sets: int,
             checksum: Callable[[Any, int], Any], audit: Callable[[], Any] | None, cover_sets: bool,
             chooser: random.SystemRandom, hold: tuple | None,
             collecting: bool) -> tuple[TimingStats, list[str], list[tuple[int, Any]]]:
        with _no_grad():
            for index in range(self.warmup_reps):
                load_set((self.reps + index) % sets)
                args = handles(live_inputs)
                if audit is not None:
                    with audit():
                        fn(*args)
                else:
                    fn(*args)
            self._sync()
            # Then, unaudited, until `warmup_s` has passed: a host-bound model's first calls after an
            # idle spell run slower (caches, clocks); only the warm-up sets are reused.
            warm_started, extra = _perf_counter_ns(), 0
            while self.warmup_reps and extra < MAX_EXTRA_WARMUPS and _perf_counter_ns() - warm_started < self.warmup_ns:
                load_set((self.reps + extra % self.warmup_reps) % sets)
                fn(*handles(live_inputs))
                self._sync()
                extra += 1
            hold_ns = 0  # set from the open repeats' issue times when the first held repeat comes
            open_target = max(1, round(self.reps * OPEN_SHARE)) if hold else self.reps
            event_ms: list[float] = []
            wall_ms: list[float] = []
            held_ms: list[float] = []
            held_issue_ms: list[float] = []
            held_tail_ms: list[float] = []
            open_issue_ms: list[float] = []
            sums: list[tuple[int, Any]] = []
            # One audited repeat at a secret position among the first ones, which every run reaches:
            # the warm-ups are audited at known positions, and a quarter drawn at random can miss
            # every repeat of a short run (0.75^10 = 6% of ten).
            audited, forced = 0, chooser.randrange(max(1, min(self.min_reps, self.reps - self.min_reps + 1)))
            started = _perf_counter_ns()
            for rep in range(self.reps):
                which = rep % sets
                load_set(which)
                checksum.prepare(which)
                args = handles(live_inputs)
                if self._flush_buffer is not None:
                    self._flush_buffer.zero_()
                self._sync()
                timed = len(wall_ms) + len(held_ms)
                if (audit is not None and (chooser.random() < 0.25 or (rep >= forced and not audited))
                        and self.reps - rep > self.min_reps - timed):
                    audited += 1
                    with audit():
                        output = fn(*args)
                    read = checksum.read(output, which)  # outside the recorder: the judge's read is not the forward's
                    self._sync()
                    sums.append((which, checksum(output, which, read)))
                    del output
                    continue
                gc.disable()
                if hold and len(wall_ms) >= open_target:
                    if not hold_ns:  # 3x the open repeats' median host issue time (not audited, unlike warm-ups)
                        hold_ns = int(1e6 * min(HOLD_MS[1], max(HOLD_MS[0], 3 * statistics.median(open_issue_ms))))
                    function, blocks, shared = hold
                    start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
                    if function(hold_ns, blocks, shared, _current_stream().cuda_stream) != 0:
                        raise RuntimeError("the timer's hold kernel failed to launch")
                    start.record()
                    t0 = _perf_counter_ns()
                    output = fn(*args)
                    read = checksum.read(output, which)
                    t1 = _perf_counter_ns()
                    end.record()
                    _event_synchronize(end)
                    t2 = _perf_counter_ns()
                    _cuda_synchronize()  # whatever still runs on other streams after the end event
                    held_tail_ms.append((_perf_counter_ns() - t2) / 1e6)
                    held_ms.append(start.elapsed_time(end))
                    held_issue_ms.append((t1 - t0) / 1e6)
                elif self.device == "cuda":
                    start, end = _CudaEvent(enable_timing=True), _CudaEvent(enable_timing=True)
                    t0 = _perf_counter_ns()
                    start.record()
                    output = fn(*args)
                    read = checksum.read(output, which)
                    t1 = _perf_counter_ns()
                    end.record()
                    _cuda_synchronize()
                    t2 = _perf_counter_ns()
                    event_ms.append(start.elapsed_time(end))
                    wall_ms.append((t2 - t0) / 1e6)
                    open_issue_ms.append((t1 - t0) / 1e6)
                else:
                    t0 = _perf_counter_ns()
                    output = fn(*args)
                    read = checksum.read(output, which)
                    t1 = _perf_counter_ns()
                    wall_ms.append((t1 - t0) / 1e6)
                sums.append((which, checksum(output, which, read)))
                del output
                if collecting:
                    gc.enable()
                covered = rep + 1 >= sets if cover_sets else True
                if (len(wall_ms) + len(held_ms) >= self.min_reps and len(wall_ms) >= min(open_target, self.min_reps)
                        and covered and _perf_counter_ns() - started > self.budget_ns):
                    break
        if self.device != "cuda":
            return _stats(wall_ms, "wall"), [], sums
        stats, flags = choose_cuda_time(event_ms, wall_ms, open_issue_ms, held_ms, held_issue_ms, held_tail_ms,
                                        hold_ns / 1e6)
        return stats, flags, sums


def choose_cuda_time(event_ms: list[float], wall_ms: list[float], open_issue_ms: list[float], held_ms: list[float],
                     held_issue_ms: list[float], held_tail_ms: list[float], hold_ms: float) -> tuple[TimingStats, list[str]]:
    """Which CUDA measurement stands (the rules in the module docstring), and the flags saying why.
    Open repeats: CUDA event times, host-clock times around a device-wide sync, host issue times.
    Held repeats: CUDA event times, host issue times, the device-wide sync's wait after the end event."""
    flags: list[str] = []
    event_stats = _stats(event_ms, "cuda_event")
    wall_stats = _stats(wall_ms, "wall+device_sync")
    if _escaped(wall_stats.median_ms - event_stats.median_ms, event_stats.median_ms):
        flags.append(UNTRACKED_WORK_FLAG)
        return wall_stats, flags
    if not held_ms:
        return event_stats, flags
    median = statistics.median
    detail = {"open_ms": event_stats.median_ms, "open_issue_ms": median(open_issue_ms),
              "held_device_ms": median(held_ms), "held_issue_ms": median(held_issue_ms), "hold_ms": hold_ms}
    event_stats.detail.update(detail)
    if _escaped(median(held_tail_ms), median(held_ms)):
        flags.append(UNTRACKED_WORK_FLAG)
        wall_stats.detail.update(detail)
        return wall_stats, flags
    if detail["held_issue_ms"] > hold_ms:
        flags.append(HELD_OUTLASTED_FLAG)
        return event_stats, flags
    held_stats = _stats([max(d, i) for d, i in zip(held_ms, held_issue_ms)], "cuda_event_held", detail)
    # The open median less its host issue time and launch latency, never less than half of it.
    open_ms = event_stats.median_ms
    floor = 0.98 * max(open_ms - detail["open_issue_ms"] - LAUNCH_LATENCY_MS, 0.5 * open_ms)
    if held_stats.median_ms < floor:
        flags.append(HELD_DISAGREES_FLAG)
        return event_stats, flags
    return held_stats, flags


PAIRS = (40, 200)  # a paired timing takes at least 40 pairs (audited ones not counted), at most 200,
PAIR_BUDGET_S = 2.0  # and stops after this long once it has the minimum


class ReferenceCallFailed(RuntimeError):
    """The reference raised in a paired call (its own failure, not the candidate's verdict)."""


class ProbedChecksum:
    """A timer's checksum with its read inside the timed window: `read(output, index)` right after
    the call returns, before the clock stops (the checksum's `probe`, where it has one:
    output_digest.DigestMaker reads its sampled values), then `self(output, index, read)` makes the
    checksum with what was read. Work a call leaves to run after it returns (a signal handler, a
    finalizer, another thread) then either lands before the read, inside the window, or shows as
    wrong sampled values. A checksum without a probe reads nothing and is called as it is."""

    def __init__(self, checksum: Callable[..., Any]):
        self._checksum = checksum
        self._probe, self._prepare = getattr(checksum, "probe", None), getattr(checksum, "prepare", None)

    def prepare(self, index: int) -> None:
        """Before the call, outside the window: what the read needs (the digest's sampled positions)."""
        if self._prepare is not None:
            self._prepare(index)

    def read(self, output: Any, index: int) -> Any:
        return self._probe(output, index) if self._probe is not None else None

    def __call__(self, output: Any, index: int, read: Any) -> Any:
        return self._checksum(output, index, read) if read is not None else self._checksum(output, index)


def time_pairs(device: str, candidate: Callable[..., Any], reference: Callable[..., Any], live_inputs: Sequence[Any],
               load_input: Callable[[int], None], checksum: Callable[[Any, int], Any], plan: Sequence[tuple[bool, bool]],
               *, after_call: Callable[[], None], audit: Callable[[], Any] | None = None,
               warmup_reps: int = 3, warmup_s: float = 0.3) -> dict[str, Any]:
    """The candidate and the reference timed call by call in this one process, so that the host's
    speed, which drifts within seconds and differs between processes, falls on both alike.

    Warm-up calls come first (both models, until `warmup_reps` each and `warmup_s`), then pair k
    of `plan` (drawn by the caller before any candidate code ran: (candidate first?, candidate
    audited?)) loads input `warm-ups + k` (`load_input`, a fresh input per pair) before each of its
    two calls. A call's time is the host clock from just before it to its return, on CUDA to a
    device-wide synchronize after it (work on every stream), after an L2 flush. Both outputs are
    checksummed (`checksum(output, input index)`) right after their call; `after_call()` runs after every call's checksum,
    both models' alike (the caller scrubs the freed memory there, so the candidate is never handed
    a reference output, and each call follows the same host work: a scrub after the reference's
    calls alone left the candidate's calls on a host cache the scrub had just churned). An
    audited candidate call runs under `audit()`, untimed. Returns the raw measurements, for the
    evaluator to reduce: {"pairs": [[input, candidate ms, reference ms], ...] (audited pairs: candidate
    ms 0), "candidate_digests": [(input, candidate's checksum)], "reference_digests": [(input, reference's)]}.
    A reference call that raises raises ReferenceCallFailed."""
    cuda = device == "cuda"
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda") if cuda else None
    sync = _cuda_synchronize if cuda else (lambda: None)
    rows: list[list[float]] = []
    sums: dict[str, list[tuple[int, Any]]] = {"candidate": [], "reference": []}
    collecting = gc.isenabled()
    gc.collect()
    checksum = ProbedChecksum(checksum)

    def call(name: str, index: int, timed: bool, audited: bool) -> float:
        load_input(index)
        checksum.prepare(index)
        args = handles(live_inputs)
        if flush is not None:
            flush.zero_()
        sync()
        fn = candidate if name == "candidate" else reference
        try:
            if audited:
                with audit():
                    output = fn(*args)
                read = checksum.read(output, index)  # outside the recorder: the judge's read is not the forward's
                sync()
                elapsed = 0.0
            else:
                gc.disable()
                t0 = _perf_counter_ns()
                output = fn(*args)
                read = checksum.read(output, index)
                sync()
                elapsed = (_perf_counter_ns() - t0) / 1e6
                if collecting:
                    gc.enable()
        except Exception as exc:  # noqa: BLE001
            if name == "reference":
                raise ReferenceCallFailed(f"{type(exc).__name__}: {exc}") from exc
            raise
        if timed:
            sums[name].append((index, checksum(output, index, read)))
        del output
        after_call()
        return elapsed

    try:
        with _no_grad():
            index = 0
            warm_started = _perf_counter_ns()
            while index < warmup_reps or (index < MAX_EXTRA_WARMUPS and _perf_counter_ns() - warm_started < warmup_s * 1e9):
                call("reference", index, False, False)
                call("candidate", index, False, False)
                index += 1
            started, timed_pairs = _perf_counter_ns(), 0
            for candidate_first, audited in plan:
                order = ("candidate", "reference") if candidate_first else ("reference", "candidate")
                took = {name: call(name, index, True, audited and audit is not None and name == "candidate")
                        for name in order}
                rows.append([float(index), took["candidate"], took["reference"]])
                index += 1
                timed_pairs += took["candidate"] > 0
                if timed_pairs >= PAIRS[0] and _perf_counter_ns() - started > PAIR_BUDGET_S * 1e9:
                    break
    finally:
        if collecting:
            gc.enable()
    return {"pairs": rows, "candidate_digests": sums["candidate"], "reference_digests": sums["reference"]}
