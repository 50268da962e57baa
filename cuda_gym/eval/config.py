"""Evaluation settings. The defaults are the recommended, trustworthy setting."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

PRECISIONS = ("fp32", "tf32")
POLICIES = ("strict", "permissive")
TIMER_REVISION = 7  # bumped when the timer or the history before it changes; part of the baseline cache key
# Host pairing (EvalConfig.host_pairing) is skipped where both timings are device time: held, and
# issued in less than this fraction of their device time (a held call counts max(device, issue), so
# its value is then the device's). The pairing's host clock would add host time to device time
# (docs/decisions/007-device-bound-timings.md).
PAIRING_ISSUE_RATIO = 1.0


def _held_within(method: str | None, detail: dict | None, ratio: float) -> bool:
    """A timing held, and issued in less than `ratio` of its device time."""
    detail = detail or {}
    device_ms, issue_ms = detail.get("held_device_ms"), detail.get("held_issue_ms")
    return method == "cuda_event_held" and bool(device_ms) and issue_ms is not None and issue_ms < ratio * device_ms


def device_time(method: str | None, detail: dict | None) -> bool:
    """Whether a timing (its `TimingStats.method` and `.detail`) is device time for the host pairing:
    held, and issued within its device time (PAIRING_ISSUE_RATIO)."""
    return _held_within(method, detail, PAIRING_ISSUE_RATIO)


def held_timing_enabled() -> bool:
    """CUDA timing with held repeats (cuda_gym/eval/timing.py), unless CUDA_GYM_TIMER_HOLD=0."""
    return os.environ.get("CUDA_GYM_TIMER_HOLD", "1") != "0"


@dataclass(frozen=True)
class EvalConfig:
    """How a candidate is judged.

    precision: "fp32" (strict: TF32 off everywhere, tight tolerance) or "tf32" (TF32 allowed for the
        candidate AND enabled for the baselines, looser tolerance).
    policy: "strict" (the forward may only create/view tensors and call the candidate's own native
        code) or "permissive" (PyTorch compute allowed, as in KernelBench's prompt; never the default).
    """

    correctness_trials: int = 5
    timing_input_sets: int = 3  # rotating input sets, so nothing can be cached by address
    warmup_reps: int = 3
    timing_reps: int = 50
    timing_min_reps: int = 10
    timing_budget_s: float = 1.0  # stop timing a callable after this long (once min reps are done)
    # After the warm-up reps, more (unaudited) warm-up calls until this long, at most 200: a host-bound
    # model's first calls after an idle spell run slower (docs/decisions/004-timing-warm-up-by-time.md).
    timing_warmup_s: float = 0.3
    l2_flush: bool = True
    # The backends whose host-bound timings are paired: unless both the eager baseline and the
    # candidate are device time (PAIRING_ISSUE_RATIO), the eval worker also times the candidate call
    # by call against a fresh reference made before any candidate code ran (timing.time_pairs: secret
    # random order, a fresh input per pair, both outputs checksummed), and the speedups use the median
    # per-pair ratio (EvalResult.compared_candidate_ms). Needs the eager baseline. A host-bound time
    # moves between processes, and two models alternated in one process do not
    # (docs/decisions/003-host-pairing-on-cuda.md); the CPU is not paired by default, its paired calls
    # being at times several times slower (docs/decisions/002-cpu-timings-unpaired.md).
    host_pairing: tuple[str, ...] = ("cuda",)
    # A milestone is confirmed: when the candidate comes out more than the reward's 5% faster than a
    # baseline, a second fresh eval worker judges it again (correctness included) and the slower time
    # stands, so one lucky process earns nothing (docs/decisions/008-confirm-milestones.md). A
    # device-bound claim is not judged again (device_bound_issue_ratio).
    confirm_faster: bool = True
    # A CUDA timing is device-bound when its calls were held (queued behind the timer's hold kernel)
    # and issuing one took the host less than this fraction of its device time: the host's speed
    # cannot move it (docs/decisions/007-device-bound-timings.md). A baseline whose first worker timed
    # it device-bound is not timed again, and a device-bound milestone claim is not confirmed again;
    # host-bound timings keep every worker. 0 turns this off.
    device_bound_issue_ratio: float = 0.5
    precision: str = "fp32"
    policy: str = "strict"
    baselines: tuple[str, ...] = ("eager", "compile")
    baseline_workers: int = 3  # each baseline is timed in up to this many fresh workers; the median worker is kept
    # The third worker is skipped when the first two agree within this fraction on every baseline: the
    # median of three always lies between the first two, so it could move the kept time by at most that.
    baseline_agreement: float = 0.02
    compile_timeout_s: float = 300.0
    eval_timeout_s: float = 120.0
    baseline_timeout_s: float = 600.0
    cpu_threads: int | None = None  # torch threads in CPU workers; None = all cores
    cpu_memory_limit_gb: float | None = 16.0  # address-space cap for CPU workers
    # What one evaluation may hold on the device (the memory plan's budget, cuda_gym/eval/memory.py),
    # at most what is free. 64 GiB leaves room for what the plan cannot see (cuDNN workspaces, the
    # allocator's rounding), so the peak stays under 80 GiB and a plan made here fits an 80 GB card.
    device_memory_gb: float | None = 64.0
    max_output_mb: float = 64.0  # cap on a worker's stdout/stderr file
    max_log_chars: int = 4000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        unknown = set(self.baselines) - {"eager", "compile"}
        if unknown:
            raise ValueError(f"unknown baselines {sorted(unknown)}; use 'eager' and/or 'compile'")
        if set(self.host_pairing) - {"cpu", "cuda"}:
            raise ValueError(f"host_pairing names backends ('cpu', 'cuda'), got {self.host_pairing!r}")
        if self.baseline_workers < 1:
            raise ValueError("baseline_workers must be >= 1")
        if not 0.0 <= self.device_bound_issue_ratio <= 1.0:
            raise ValueError("device_bound_issue_ratio must be in [0, 1]")
        if not 0.0 <= self.baseline_agreement < 0.5:
            raise ValueError("baseline_agreement must be in [0, 0.5)")
        if self.correctness_trials < 2:
            raise ValueError("correctness_trials must be >= 2 (one draw cannot detect caching)")

    def device_bound(self, method: str | None, detail: dict | None) -> bool:
        """Whether a timing (its `TimingStats.method` and `.detail`) is device-bound, as defined at
        `device_bound_issue_ratio`: held, and issued in less than that fraction of its device time."""
        return _held_within(method, detail, self.device_bound_issue_ratio)

    def replace(self, **changes) -> "EvalConfig":
        return dataclasses.replace(self, **changes)

    def for_check(self) -> "EvalConfig":
        """The check judge's settings (the environments' `check` command): full correctness
        trials, no baselines, one timed call without warm-up; so no speedups."""
        return self.replace(baselines=(), warmup_reps=0, timing_reps=1, timing_min_reps=1, timing_input_sets=1)

    @property
    def rel_norm_tolerance(self) -> float:
        """Max ||out - ref|| / ||ref||. fp32 kernels land near 1e-6; TF32 near 3e-4."""
        return 5e-5 if self.precision == "fp32" else 2e-3

    @property
    def elementwise_rtol(self) -> float:
        return 1e-3 if self.precision == "fp32" else 1e-2

    @property
    def reference_noise_multiple(self) -> float:
        """On a task whose fp32 reference is further from its float64 twin than these tolerances
        allow, how many times the reference's own error a candidate may be from the reference
        (`correctness.tolerance_floor`): the policy's tolerance over a typical reference's own error
        under it, rounded down to a power of two, since cancellation amplifies a correct candidate's
        rounding as it does the reference's (docs/decisions/009-reference-noise-multiple.md)."""
        return 256.0 if self.precision == "fp32" else 4.0
