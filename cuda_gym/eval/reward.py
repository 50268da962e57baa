"""Reward functions: `EvalResult` (and the episode's history) -> float. Pluggable by name."""
from __future__ import annotations

import math
from typing import Callable, Sequence

from .result import EvalResult

RewardFn = Callable[[EvalResult, Sequence[EvalResult]], float]

FASTER_MARGIN = 1.05  # "faster" means more than 5% faster, as in CUDA Agent


DEGENERATE_FLAG = "degenerate_task"  # the task cannot tell a kernel from a constant (correctness.degenerate_reason)
TRITON_INTERPRETED_FLAG = "triton_interpreted"  # Triton kernels ran in Triton's interpreter: the timings mean nothing


def _faster(speedup: float | None) -> bool:
    return (speedup or 0.0) > FASTER_MARGIN


def pays_for_speed(result: EvalResult) -> bool:
    """Whether speed may earn anything: not on a task whose output cannot tell a kernel from a
    constant, where a kernel that writes the constant is "correct" and as fast as memory allows;
    not where the timings came from Triton's interpreter (the CPU backend), which measures nothing."""
    return DEGENERATE_FLAG not in result.flags and TRITON_INTERPRETED_FLAG not in result.flags


def claims_milestone(result: EvalResult) -> bool:
    """More than the milestone margin faster than some baseline, where speed pays (what the
    evaluator confirms)."""
    return pays_for_speed(result) and (_faster(result.speedup_vs_eager) or _faster(result.speedup_vs_compile))


def milestone_reward(result: EvalResult, history: Sequence[EvalResult] = ()) -> float:
    """CUDA Agent's milestone reward: -1 failed or wrong; 1 correct; 2 if >5% faster than eager;
    3 if >5% faster than both eager and torch.compile. On a degenerate task (`pays_for_speed`),
    correct earns 1 whatever the speed."""
    if not result.correct:
        return -1.0
    if not pays_for_speed(result):
        return 1.0
    faster_eager = _faster(result.speedup_vs_eager)
    faster_compile = _faster(result.speedup_vs_compile)
    if faster_eager and faster_compile:
        return 3.0
    if faster_eager:
        return 2.0
    return 1.0


def log_speedup_reward(result: EvalResult, history: Sequence[EvalResult] = ()) -> float:
    """Continuous: log(speedup) over the best available baseline (torch.compile, else eager);
    -1 when not correct. 0 means as fast as the baseline, and is all a degenerate task pays."""
    if not result.correct:
        return -1.0
    if not pays_for_speed(result):
        return 0.0
    speedup = result.speedup_vs_compile or result.speedup_vs_eager
    if not speedup:
        return 0.0
    return math.log(speedup)


REWARDS: dict[str, RewardFn] = {"milestone": milestone_reward, "log_speedup": log_speedup_reward}


def get_reward(reward: str | RewardFn) -> RewardFn:
    if callable(reward):
        return reward
    try:
        return REWARDS[reward]
    except KeyError:
        raise ValueError(f"unknown reward {reward!r}; choose one of {sorted(REWARDS)} or pass a callable") from None
