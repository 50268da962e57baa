"""Evaluator.prewarm on the CPU: a task's torch.compile baseline compiled ahead, untimed, is found
in inductor's cache by the baseline worker that times it; cached tasks and a one-at-a-time setting
do nothing; a reference that fails is reported, not raised."""
from __future__ import annotations

import pytest

from cuda_gym.eval import EvalConfig, Evaluator
from cuda_gym.tasks.task import Task

SCALED_TANH = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return torch.tanh(x * {factor}) + 0.5


def get_inputs():
    return [torch.randn(16, 96)]


def get_init_inputs():
    return [{factor}]
"""

BROKEN = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this reference always fails")


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_prewarmed_compile_is_a_cache_hit_for_the_baseline_worker(tmp_path):
    # A graph no other test compiles (the factor is drawn from the tmp path), so the hit is this prewarm's.
    factor = 1.0 + (hash(str(tmp_path)) % 997) / 1000
    task = Task(id="test/L1/prewarm_tanh", level=1, name="prewarm_tanh", source=SCALED_TANH.format(factor=factor))
    broken = Task(id="test/L1/prewarm_broken", level=1, name="prewarm_broken", source=BROKEN)
    config = EvalConfig(baseline_workers=1, cpu_threads=1)
    with Evaluator("cpu", config, cache_dir=tmp_path / "cache") as evaluator:
        assert evaluator.prewarm([task], parallel=1) == {}  # one at a time gains nothing: skipped
        outcomes = evaluator.prewarm([task, broken], parallel=2)
        assert outcomes[task.id] == ""
        assert "always fails" in outcomes[broken.id]
        baselines = evaluator.baselines(task)
        assert baselines["compile"] is not None
        assert baselines["compile_cache"][0].get("fxgraph_cache_hit", 0) >= 1, baselines["compile_cache"]
        assert evaluator.prewarm([task], parallel=2) == {}  # its baselines are cached now


def test_prewarm_without_a_compile_baseline_does_nothing(tmp_path):
    task = Task(id="test/L1/prewarm_tanh", level=1, name="prewarm_tanh", source=SCALED_TANH.format(factor=2.0))
    with Evaluator("cpu", EvalConfig(baselines=("eager",)), cache_dir=tmp_path / "cache") as evaluator:
        assert evaluator.prewarm([task], parallel=2) == {}
