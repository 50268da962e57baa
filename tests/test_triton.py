"""Triton candidates on the CPU, through Triton's interpreter: the shipped Triton reference
solutions are judged OK under the strict policy, their timings are flagged as meaningless and pay
no speed milestone, and a Triton candidate plays a full episode of the built-in level-1 environment."""
from __future__ import annotations

import dataclasses

import pytest

from cuda_gym.eval import Candidate, ErrorCode, EvalResult, milestone_reward, triton_support
from cuda_gym.eval.reward import TRITON_INTERPRETED_FLAG, pays_for_speed
from cuda_gym.tasks import load_suite, solution_path

needs_triton = pytest.mark.skipif(not triton_support.available(),
                                  reason="triton is not installed (pip install cuda_gym[triton]); Triton "
                                         "candidates are judged through it (its interpreter on the CPU)")
TRITON_SOLVED = [t for t in load_suite("builtin", levels=(1, 2)) if solution_path(t, "cpu", language="triton")]


def test_at_least_six_triton_solutions_of_levels_1_and_2():
    assert len(TRITON_SOLVED) >= 6, [t.id for t in TRITON_SOLVED]
    for task in TRITON_SOLVED:
        candidate = Candidate(solution_path(task, "cpu", language="triton").read_text())
        assert candidate.language == "triton" and candidate.form == "triton"


def test_interpreted_timings_pay_no_speed():
    fast = EvalResult("builtin/L1/gelu", "cpu", ErrorCode.OK, correct=True, speedup_vs_eager=9.0,
                      speedup_vs_compile=9.0)
    assert milestone_reward(fast) == 3.0
    interpreted = dataclasses.replace(fast, flags=[TRITON_INTERPRETED_FLAG])
    assert not pays_for_speed(interpreted) and milestone_reward(interpreted) == 1.0


def test_language_of_a_candidate():
    assert Candidate("import triton.language as tl\nclass ModelNew: pass\n").language == "triton"
    assert Candidate("from cuda_gym.native import load_kernels\nclass ModelNew: pass\n").language == "cuda"
    assert Candidate("# triton is mentioned, not imported\nclass ModelNew: pass\n").language == "cuda"


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("task", TRITON_SOLVED, ids=lambda t: t.id)
def test_triton_solution_is_ok_through_the_interpreter(cpu_evaluator, task):
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu", language="triton").read_text())
    assert result.ok, f"{task.id}: {result.error_code.value}: {result.message}\n{result.runtime_log[-1500:]}"
    assert result.policy == "strict" and not result.forbidden_ops
    assert result.language == "triton" and TRITON_INTERPRETED_FLAG in result.flags
    assert milestone_reward(result) == 1.0  # correct; interpreted speed earns nothing
