"""Device memory inside a worker: how many input draws and reference outputs stay resident, how freed
memory is scrubbed before candidate code can be handed it, and what an out-of-memory failure says.

KernelBench's level-1 tasks reach 16 GiB of inputs plus output; holding every draw of such a task
at once needs 8 times that. The plan (`plan_memory`, a pure function) keeps resident only what fits
the budget: the task's base inputs always, a reference output per correctness trial while it fits
(the others are recomputed after the candidate's trial, on the same draw), and as many timing input
sets as fit (with none, the base inputs serve: every timed call still gets fresh, rotated values). Draws themselves are
never stored: `draws.make_draw` makes any of them again from the seed.

A reference output that is freed is scrubbed (its memory filled with NaN) before candidate code
runs, so a candidate that returns an uninitialised buffer can never be handed the expected answer.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from .correctness import STATS_CHUNK_ELEMENTS

GIB = float(2**30)
# Head room the plan leaves beside its own working set, for the candidate's workspace and the
# allocator's rounding: a quarter of the largest tensor, and on CUDA at least 256 MiB.
_SLACK_FRACTION = 0.25
CUDA_SLACK_MIN_BYTES = 256 * 2**20


class NotEnoughMemory(Exception):
    """Not even one input draw and its reference output fit the device: the task cannot run here."""

    def __init__(self, needed_bytes: int, available_bytes: int, what: str):
        self.needed_bytes = needed_bytes
        self.available_bytes = available_bytes
        super().__init__(f"{what} needs {needed_bytes / GIB:.2f} GiB of device memory, but only "
                         f"{available_bytes / GIB:.2f} GiB are available to the evaluation")


@dataclass
class MemoryPlan:
    """What the worker keeps on the device. Sizes in bytes; `to_meta` reports GiB."""

    input_bytes: int  # one set of the task's inputs
    output_bytes: int  # the reference's outputs for one draw
    reference_extra_bytes: int  # the reference's transient workspace beyond its outputs
    budget_bytes: int  # what the evaluation may use on the device
    used_bytes: int  # in use when the plan was made (model weights, base inputs)
    resident_outputs: int  # correctness trials whose reference output stays resident
    timing_sets: int  # timing input sets kept resident (0: the base inputs are the one timing set)
    model_copy_bytes: int = 0  # weights the evaluation copies later: the candidate's, the paired reference's

    def to_meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = {k: round(v / GIB, 6) for k, v in asdict(self).items() if k.endswith("_bytes")}
        meta = {k.replace("_bytes", "_gib"): v for k, v in meta.items()}
        meta.update(resident_outputs=self.resident_outputs, timing_sets=self.timing_sets)
        return meta


def plan_memory(*, input_bytes: int, output_bytes: int, reference_extra_bytes: int, used_bytes: int,
                budget_bytes: int, trials: int, timing_sets: int, min_slack_bytes: int = 0,
                model_copy_bytes: int = 0) -> MemoryPlan:
    """The residency plan for one task, or NotEnoughMemory when even one trial cannot run.

    A trial needs, beside what is in use: the candidate's copy of the inputs, its output, a fresh
    copy of the draw (to check the inputs were not modified) and, when the reference output is
    not resident, the reference's output and workspace once more; plus slack; and, for the whole
    evaluation, `model_copy_bytes`: the weights copied after the plan is made (the candidate's
    model, and the host pairing's fresh reference instance). Each resident
    reference output costs `output_bytes`. Timing needs a live input set, a rotated variant being
    made, the candidate's output and slack; each resident timing set costs `input_bytes` (with
    none, the base inputs serve as the one timing set). Resident reference outputs come first,
    then timing sets: both only save time, since the rest are made again."""
    largest = max(input_bytes, output_bytes, 1)
    slack = max(min_slack_bytes, int(_SLACK_FRACTION * largest))
    free = budget_bytes - used_bytes - model_copy_bytes
    working = 2 * input_bytes + 2 * output_bytes + reference_extra_bytes + slack
    room = free - working
    if room < 0:
        raise NotEnoughMemory(used_bytes + model_copy_bytes + working, budget_bytes, "one correctness trial of this task")
    resident = min(trials, room // max(output_bytes, 1))
    room -= resident * output_bytes
    sets = min(timing_sets, room // max(input_bytes, 1))
    return MemoryPlan(input_bytes, output_bytes, reference_extra_bytes, budget_bytes, used_bytes,
                      int(resident), int(sets), model_copy_bytes)


def float64_twin_bytes(plan: MemoryPlan, parameter_bytes: int, min_slack_bytes: int = 0) -> int:
    """What measuring the reference against its float64 twin needs at most, beside what is in use
    and the plan's resident reference outputs, while the trials' reference outputs are made: the
    twin's weights (twice the fp32 ones), a draw and its float64 copy (three times the inputs), a
    draw's fp32 outputs and their float64 twins (three times the outputs), the twin's workspace
    (twice the reference's), the comparison's float64 chunks (three, each at most twice the
    outputs) and twice the plan's slack."""
    largest = 2 * max(plan.input_bytes, plan.output_bytes, 1)
    slack = max(min_slack_bytes, int(_SLACK_FRACTION * largest))
    comparison = 3 * min(2 * plan.output_bytes, 8 * STATS_CHUNK_ELEMENTS)
    return (2 * parameter_bytes + 3 * plan.input_bytes + 3 * plan.output_bytes + 2 * plan.reference_extra_bytes
            + comparison + slack)


def float64_twin_fits(plan: MemoryPlan, parameter_bytes: int, min_slack_bytes: int = 0) -> tuple[bool, str]:
    """Whether `float64_twin_bytes` fits the plan's budget, and if not, a sentence with the numbers."""
    needed = plan.used_bytes + plan.resident_outputs * plan.output_bytes + float64_twin_bytes(
        plan, parameter_bytes, min_slack_bytes)
    if needed <= plan.budget_bytes:
        return True, ""
    return False, (f"the float64 copy of the reference would take the evaluation to {needed / GIB:.2f} GiB, over "
                   f"its {plan.budget_bytes / GIB:.2f} GiB budget")


def tensor_bytes(values: Sequence[Any]) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def device_budget_bytes(device: str, cap_gb: float | None) -> int:
    """What the evaluation may use: what this process holds or could still get, at most `cap_gb`."""
    if device == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info()
        available = free + torch.cuda.memory_reserved()
    else:
        available = _host_available_bytes()
    if cap_gb is not None:
        available = min(available, int(cap_gb * GIB))
    return int(available)


def _host_available_bytes() -> int:
    """MemAvailable, and no more than the address-space limit leaves (CPU workers run under one)."""
    available = 1 << 62
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            with open("/proc/self/statm", encoding="ascii") as handle:
                mapped = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            available = min(available, max(0, soft - mapped))
        except (OSError, ValueError):
            pass
    return available


def device_used_bytes(device: str) -> int:
    if device == "cuda":
        import torch

        return int(torch.cuda.memory_allocated())
    return 0  # host tensors are counted in the plan's own terms (the budget is what is left)


class PeakMeter:
    """The CUDA caching allocator's peaks, reserved and allocated, between `take` calls, read
    through torch's C functions as they were when the meter was made (in a worker, before any
    candidate code: candidate code can patch torch.cuda's Python functions). The allocations of
    `scrub_freed` are left out of the allocated peak (they take every cached block, so they would
    make it the cache's size); its reserved peak counts (it takes only cached blocks)."""

    def __init__(self):
        import torch

        self._stats = torch._C._cuda_memoryStats
        self._reset = torch._C._cuda_resetPeakMemoryStats
        self._device = torch.cuda.current_device()
        self._held = (0, 0)  # peaks noted before the scrubs since the last take (bytes)

    def _peaks(self) -> tuple[int, int]:
        stats = self._stats(self._device)
        return int(stats["reserved_bytes"]["all"]["peak"]), int(stats["allocated_bytes"]["all"]["peak"])

    def before_scrub(self) -> None:
        try:
            reserved, allocated = self._peaks()
        except Exception:  # noqa: BLE001 - a diagnostic: the scrub must run whatever happens here
            return
        self._held = (max(self._held[0], reserved), max(self._held[1], allocated))

    def after_scrub(self) -> None:
        try:
            reserved, _ = self._peaks()
            self._reset(self._device)
        except Exception:  # noqa: BLE001 - a diagnostic
            return
        self._held = (max(self._held[0], reserved), self._held[1])

    def take(self) -> tuple[float, float] | None:
        """(reserved, allocated) peaks in GiB since the last take, which starts a new span; None
        where the allocator's statistics cannot be read."""
        try:
            reserved, allocated = self._peaks()
            self._reset(self._device)
        except Exception:  # noqa: BLE001 - a diagnostic, never the job's failure
            return None
        peaks = (max(self._held[0], reserved) / GIB, max(self._held[1], allocated) / GIB)
        self._held = (0, 0)
        return peaks


# The worker's meter (phase_clock.PhaseClock sets it on CUDA); scrub_freed keeps its own
# allocations out of the meter's allocated peak.
peak_meter: PeakMeter | None = None


def scrub_freed(device: str, sizes: Sequence[int] = (), *, keep_cache: bool = False) -> None:
    """Fill memory that the allocator holds free with NaN bytes, so candidate code is never handed
    a freed reference output. On CUDA every free block of torch's caching allocator is taken (a
    request of a block's own size is served by a block of that size), filled with 0xFF (NaN in
    every floating dtype) and released, then the cache is emptied. On the CPU, where large blocks go back to the system and
    come back zeroed, blocks of the given `sizes` (in bytes) are taken from the heap the same way."""
    import torch

    held = []
    if device == "cuda":
        meter = peak_meter
        if meter is not None:
            meter.before_scrub()  # never raises (PeakMeter): the scrub below always runs
        for segment in torch.cuda.memory_snapshot():
            for block in segment.get("blocks", []):
                if block.get("state") == "inactive" and block.get("size", 0) > 0:
                    held.append(torch.empty(int(block["size"]), dtype=torch.uint8, device="cuda"))
        for tensor in held:
            tensor.fill_(255)
        torch.cuda.synchronize()
        del held
        # Scrubbed, then given back to the driver: the next allocations come from cudaMalloc (whose
        # pages now hold NaN or never held a reference output), and the reserved peak stays low.
        # `keep_cache`: left in the cache (scrubbed), so that the next calls allocate as fast as before.
        if not keep_cache:
            torch.cuda.empty_cache()
        if meter is not None:
            meter.after_scrub()
        return
    else:
        for size in sizes:
            if size > 0:
                held.append(torch.full((int(size),), 255, dtype=torch.uint8))
    del held


def out_of_memory_message(device: str, plan: MemoryPlan | None, who: str) -> str:
    """What a failed allocation means, with the numbers: for the candidate, what the evaluation
    holds and what was left; for the reference, what the task needs."""
    parts = [f"{who} ran out of device memory" if device == "cuda" else f"{who} ran out of memory"]
    if device == "cuda":
        try:
            import torch

            free, total = torch.cuda.mem_get_info()
            parts.append(f"{torch.cuda.memory_allocated() / GIB:.2f} GiB allocated by this process, "
                         f"{free / GIB:.2f} GiB of {total / GIB:.1f} GiB free on the device")
        except Exception:  # noqa: BLE001 - after a sticky CUDA error the device cannot be queried
            pass
    if plan is not None:
        parts.append(f"the task's inputs take {plan.input_bytes / GIB:.2f} GiB and its outputs "
                     f"{plan.output_bytes / GIB:.2f} GiB; the evaluation may use {plan.budget_bytes / GIB:.2f} GiB")
    return "; ".join(parts)


FREED_MEMORY_WAIT_S = 20.0  # how long a set-up short of memory waits for other processes to free theirs


def wait_for_freed_device_memory() -> bool:
    """Frees this process's cached blocks, then waits (up to FREED_MEMORY_WAIT_S) until the CUDA
    device's free memory has not risen for a second. True if it rose meanwhile: worth a retry (a
    worker killed just before may still be freeing its memory)."""
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()
    first = last = torch.cuda.mem_get_info()[0]
    stable_since = started = time.perf_counter()
    while time.perf_counter() - started < FREED_MEMORY_WAIT_S and time.perf_counter() - stable_since < 1.0:
        time.sleep(0.1)
        free = torch.cuda.mem_get_info()[0]
        if free > last + (64 << 20):
            stable_since = time.perf_counter()
        last = max(last, free)
    return last > first + (256 << 20)
