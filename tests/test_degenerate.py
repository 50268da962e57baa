"""Degenerate tasks (an output that cannot tell a kernel from a constant) pay nothing for speed, and
the environments and the leaderboard leave them out unless asked."""
from __future__ import annotations

import gymnasium as gym
import pytest

from cuda_gym.eval import ErrorCode, EvalResult, Evaluator
from cuda_gym.eval.reward import DEGENERATE_FLAG, claims_milestone, log_speedup_reward, milestone_reward
from cuda_gym.tasks.degenerate import degenerate_reason
from cuda_gym.tasks.task import task_from_source

from .conftest import TEST_CONFIG

# KernelBench's L2/80 in miniature: GEMM, max over the features (one column left), minus its own
# mean (zero), GELU(0) = 0: zero for every input.
ZERO_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = self.gemm(x)
        x = torch.max(x, dim=1, keepdim=True).values
        x = x - x.mean(dim=1, keepdim=True)
        return torch.nn.functional.gelu(x)

def get_inputs():
    return [torch.randn(256, 64)]

def get_init_inputs():
    return [64, 128]
'''

ZEROS_CANDIDATE = '''
import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(cpp="""
#include <cstdint>
extern "C" void zeros(float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = 0.0f; }
""", functions=["void zeros(float* y, int64_t n)"])

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)

    def forward(self, x):
        y = torch.empty(x.shape[0], 1)
        _lib.zeros(y, y.numel())
        return y
'''


def _result(flags: list[str], speedup: float) -> EvalResult:
    return EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.OK, correct=True, flags=flags,
                      speedup_vs_eager=speedup, speedup_vs_compile=speedup)


def test_a_degenerate_task_pays_no_speed_milestone():
    fast = _result([], 40.0)
    assert milestone_reward(fast) == 3.0 and claims_milestone(fast)
    degenerate = _result([DEGENERATE_FLAG], 40.0)
    assert milestone_reward(degenerate) == 1.0
    assert log_speedup_reward(degenerate) == 0.0
    assert not claims_milestone(degenerate)  # nothing to confirm


@pytest.mark.slow
def test_a_zeros_kernel_on_a_degenerate_task_is_correct_earns_at_most_1_and_says_why(tmp_path):
    task = task_from_source(ZERO_TASK, task_id="test/L2/gemm_max_minus_mean_gelu", level=2,
                            name="gemm_max_minus_mean_gelu")
    with Evaluator("cpu", TEST_CONFIG, cache_dir=tmp_path) as evaluator:
        result = evaluator.evaluate(task, ZEROS_CANDIDATE)
        assert result.ok, result.message
        assert DEGENERATE_FLAG in result.flags
        assert "cannot tell a kernel from a constant" in result.message and "reward at most 1" in result.message
        assert milestone_reward(result) <= 1.0
        # Found once and kept with the task's baselines: the next evaluation is given it.
        (entry,) = evaluator._baselines._entries.values()
        assert "(near) zero" in entry["degenerate"]
        again = evaluator.evaluate(task, ZEROS_CANDIDATE)
        assert DEGENERATE_FLAG in again.flags and milestone_reward(again) <= 1.0


def _fake_kernelbench(root):
    """Two level-2 files under KernelBench's layout (written here; no KernelBench file is used):
    one named as a task the committed list calls degenerate, one not."""
    level = root / "level2"
    level.mkdir(parents=True)
    (level / "80_Gemm_Max_Subtract_GELU.py").write_text(ZERO_TASK)
    (level / "99_Plain_Gemm.py").write_text(ZERO_TASK.replace("torch.max(x, dim=1, keepdim=True).values", "x")
                                            .replace("x = x - x.mean(dim=1, keepdim=True)", ""))
    return root


def test_environments_leave_degenerate_tasks_out_unless_asked(tmp_path):
    root = _fake_kernelbench(tmp_path)
    assert degenerate_reason("kernelbench/L2/80_Gemm_Max_Subtract_GELU")
    env = gym.make("CudaKernel-L2-v1", data_path=str(root), backend="cpu").unwrapped
    assert [t.id for t in env.tasks] == ["kernelbench/L2/99_Plain_Gemm"]
    env = gym.make("CudaKernel-L2-v1", data_path=str(root), backend="cpu", include_degenerate=True).unwrapped
    assert "kernelbench/L2/80_Gemm_Max_Subtract_GELU" in [t.id for t in env.tasks]
    with pytest.raises(ValueError, match="include_degenerate=True"):
        gym.make("CudaKernel-L2-v1", data_path=str(root), backend="cpu",
                 task_filter=["kernelbench/L2/80_Gemm_Max_Subtract_GELU"])
    schedule = gym.make("CudaSchedule-L2-v1", data_path=str(root), backend="cpu").unwrapped
    assert all(not degenerate_reason(t.id) for t in schedule.tasks)


def test_the_leaderboard_leaves_them_out_and_the_task_list_marks_them(tmp_path, monkeypatch, capsys):
    import argparse

    from cuda_gym.cli import main
    from cuda_gym.leaderboard.command import _select_tasks

    root = _fake_kernelbench(tmp_path)
    args = argparse.Namespace(suite="kernelbench", levels=None, data_path=str(root), tasks=None,
                              include_degenerate=False)
    assert [t.id for t in _select_tasks(args)] == ["kernelbench/L2/99_Plain_Gemm"]
    args.include_degenerate = True
    assert len(_select_tasks(args)) == 2
    monkeypatch.setenv("CUDA_GYM_KERNELBENCH", str(root))
    assert main(["tasks", "list", "kernelbench"]) == 0
    listing = capsys.readouterr().out
    marked = [line for line in listing.splitlines() if "[degenerate" in line]
    assert len(marked) == 1 and "80_Gemm_Max_Subtract_GELU" in marked[0]
