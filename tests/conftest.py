"""Shared fixtures: one CPU evaluator per test session (workers are forked from one fork server)."""
from __future__ import annotations

import os
import shutil

import pytest

from cuda_gym.eval import EvalConfig, Evaluator

# Small and quick, but every stage runs: 5 correctness draws, rotating timed inputs, eager baseline.
TEST_CONFIG = EvalConfig(baselines=("eager",), baseline_workers=1, timing_reps=5, timing_min_reps=3, warmup_reps=1,
                         timing_budget_s=0.3, eval_timeout_s=60.0, compile_timeout_s=240.0,
                         confirm_faster=False)  # on in tests/test_evaluator.py's confirmation tests


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""


def pytest_collection_modifyitems(config, items):
    if has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run with -m gpu on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    # A persistent cache between CI steps is allowed (CUDA_GYM_TEST_CACHE); otherwise one per session.
    path = os.environ.get("CUDA_GYM_TEST_CACHE")
    return path or str(tmp_path_factory.mktemp("cuda_gym_cache"))


@pytest.fixture(scope="session")
def cpu_evaluator(cache_dir):
    with Evaluator("cpu", TEST_CONFIG, cache_dir=cache_dir) as evaluator:
        yield evaluator


@pytest.fixture(scope="session")
def cuda_evaluator(cache_dir):
    """One CUDA evaluator for every GPU test (one warm spare, one device slot)."""
    with Evaluator("cuda", TEST_CONFIG, cache_dir=cache_dir) as evaluator:
        evaluator.test_cache_dir = cache_dir
        yield evaluator


@pytest.fixture
def wide_pairing_band(monkeypatch):
    """The 2x band between the paired medians and the unpaired timings (judgement.PAIRED_AGREEMENT),
    made 100x: on the 2-core CPU a whole worker process is at times 4x slow
    (benchmarks/results/cpu_pairing/cpu-2core/2026-12-05.json), which the band (tested on its own in
    test_evaluator.py) rightly answers by skipping the pairing; tests that use this are about what a
    pairing that stands does."""
    from cuda_gym.eval import judgement

    monkeypatch.setattr(judgement, "PAIRED_AGREEMENT", 100.0)
