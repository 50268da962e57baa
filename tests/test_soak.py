"""Soak: eighty mixed candidates (legitimate, wrong, crashing, hanging, hostile), after one of
each, submitted through one evaluator. Every submission gets exactly one verdict, the expected one; afterwards no
worker process or scratch directory is left and the test process's memory stayed flat.

N submissions: CUDA_GYM_SOAK_N (default below, about 4-5 minutes on 2 CPU cores, so that the whole suite
stays under 40 minutes in CI; set it higher for a longer soak).
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
from concurrent.futures import wait

import pytest

from cuda_gym.eval import ErrorCode, Evaluator
from cuda_gym.tasks import get_task, solution_path

from .conftest import TEST_CONFIG
from .helpers import CORRECT_BODY, GELU_TASK, native_candidate
from .leaks import leaked, snapshot

DEFAULT_N = 80
# Light timing (the soak checks robustness, not speed), a short timeout for the hanging kinds.
SOAK_CONFIG = dataclasses.replace(TEST_CONFIG, correctness_trials=3, timing_reps=3, timing_min_reps=2,
                                  warmup_reps=1, timing_budget_s=0.05, eval_timeout_s=10.0,
                                  compile_timeout_s=60.0)


def _kinds() -> dict[str, tuple[str, ErrorCode, int]]:
    """name -> (source, expected code, weight). Sources repeat, so builds are cached by content."""
    honest = solution_path(get_task(GELU_TASK), "cpu").read_text()
    forward = "        y = torch.empty_like(x)\n        _lib.run(x, y, x.numel())\n        return y\n"
    return {
        "honest": (honest, ErrorCode.OK, 6),
        "simple_correct": (native_candidate(CORRECT_BODY), ErrorCode.OK, 4),
        "wrong": (native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i];"), ErrorCode.INCORRECT, 3),
        "uninit": (native_candidate("", python_forward=forward), ErrorCode.INCORRECT, 2),
        "segfault": (native_candidate("volatile int* p = nullptr; *p = 1;"), ErrorCode.RUNTIME_ERROR, 2),
        "abort": (native_candidate("std::abort();"), ErrorCode.RUNTIME_ERROR, 1),
        "os_exit": (native_candidate("_exit(0);"), ErrorCode.RUNTIME_ERROR, 1),
        "raises": (native_candidate(CORRECT_BODY, python_forward="        raise ValueError('boom')\n"),
                   ErrorCode.RUNTIME_ERROR, 1),
        "hang": (native_candidate("volatile int spin = 1; while (spin) {}"), ErrorCode.TIMEOUT, 1),
        "compile_error": (native_candidate("this is not C++;"), ErrorCode.COMPILE_ERROR, 1),
        "invalid": ("def forward(:", ErrorCode.INVALID_ACTION, 1),
        "torch_fallback": (native_candidate(CORRECT_BODY, python_forward=(
            "        _lib.run(x, torch.empty_like(x), 1)\n        return torch.nn.functional.gelu(x)\n")),
            ErrorCode.FORBIDDEN, 2),
        "gc_reference": (native_candidate(CORRECT_BODY, extra="import gc", python_forward=(
            "        store = [o for o in gc.get_objects() if hasattr(o, 'reference_outputs')]\n" + forward)),
            ErrorCode.FORBIDDEN, 1),
        "huge_alloc": (native_candidate(CORRECT_BODY, python_forward=(
            "        w = torch.empty(10**12)\n" + forward)), ErrorCode.OUT_OF_MEMORY, 1),
        "setsid_children": (native_candidate(
            "static bool done = false; if (!done) { done = true; for (int k = 0; k < 8; ++k) "
            "if (fork() == 0) { setsid(); for (;;) pause(); } }\n" + CORRECT_BODY), ErrorCode.OK, 1),
    }


def _rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@pytest.mark.slow
def test_soak_mixed_candidates(tmp_path):
    n = int(os.environ.get("CUDA_GYM_SOAK_N", DEFAULT_N))
    kinds = _kinds()
    names = [name for name, (_, _, weight) in kinds.items() for _ in range(weight)]
    rng = random.Random(1234)
    plan = [rng.choice(names) for _ in range(n)]
    task = get_task(GELU_TASK)
    cache = tmp_path / "cache"
    before = snapshot()
    started = time.monotonic()
    with Evaluator("cpu", SOAK_CONFIG, cache_dir=cache) as evaluator:
        # Warm-up: every kind once (builds, baselines, workers), then the memory baseline.
        warm = [evaluator.submit(task, kinds[name][0]) for name in kinds]
        wait(warm)
        rss_start = _rss_mb()
        futures = [evaluator.submit(task, kinds[name][0]) for name in plan]
        done, pending = wait(futures, timeout=60 * 60)
        rss_end = _rss_mb()
        run_dir = evaluator.run_dir
    elapsed = time.monotonic() - started
    assert not pending, f"{len(pending)} submissions never got a verdict"
    wrong = []
    for index, (name, future) in enumerate(zip(plan, futures)):
        result = future.result()
        if result.error_code is not kinds[name][1]:
            wrong.append(f"#{index} {name}: {result.error_code.value} (expected {kinds[name][1].value}): "
                         f"{result.message[:200]}")
    assert not wrong, f"{len(wrong)} of {n} wrong verdicts:\n" + "\n".join(wrong[:20])
    for name, future in zip(kinds, warm):
        assert future.result().error_code is kinds[name][1], (name, future.result().message[:300])
    leftovers = leaked(before, str(cache))
    assert not leftovers, f"processes left behind: {leftovers}"
    worker_dirs = [p.name for p in run_dir.iterdir()] if run_dir.exists() else []
    assert not worker_dirs, f"worker scratch directories left behind: {worker_dirs}"
    assert rss_end - rss_start < 200, f"the evaluator's process grew by {rss_end - rss_start:.0f} MB"
    print(f"\nsoak: {n} submissions (+{len(kinds)} warm-up) in {elapsed:.0f} s "
          f"({60 * (n + len(kinds)) / elapsed:.1f}/min), RSS {rss_start:.0f} -> {rss_end:.0f} MB")
