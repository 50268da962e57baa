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


@needs_triton
@pytest.mark.slow
def test_triton_candidate_plays_a_full_builtin_l1_episode(cpu_evaluator):
    """language="triton": the prompt asks for Triton; a Triton candidate is checked, then submitted,
    and the episode ends with the verdict's reward (1: correct; interpreted speed earns nothing)."""
    import gymnasium as gym

    import cuda_gym  # noqa: F401 - registers the IDs

    task_id = "builtin/L1/softmax"
    env = gym.make("CudaKernel-Builtin-L1-v1", backend="cpu", evaluator=cpu_evaluator, language="triton",
                   max_turns=3)
    try:
        observation, info = env.reset(options={"task_id": task_id})
        assert info["language"] == "triton" and info["task_id"] == task_id
        assert "@triton.jit" in observation and "your own Triton kernels" in observation
        assert "load_kernels" not in observation  # the native format is not what it shows
        source = solution_path(env.unwrapped.task, "cpu", language="triton").read_text()
        observation, reward, terminated, truncated, info = env.step("#! check\n" + source)
        assert not (terminated or truncated) and info["result"]["correct"], observation
        observation, reward, terminated, truncated, info = env.step("#! submit\n" + source)
        assert terminated and reward == 1.0, observation
        assert info["result"]["error_code"] == "OK" and info["result"]["language"] == "triton"
        assert TRITON_INTERPRETED_FLAG in info["result"]["flags"]
    finally:
        env.close()


def test_language_option_is_checked():
    from cuda_gym.envs.kernel_env import KernelEnv

    with pytest.raises(ValueError, match="language must be one of"):
        KernelEnv(backend="cpu", language="rust")


def test_workspace_guide_and_prompt_follow_the_language(tmp_path):
    from cuda_gym.envs.kernel_env import KernelEnv
    from cuda_gym.envs.workspace_env import WorkspaceEnv

    env = WorkspaceEnv(backend="cpu", language="triton", workdir_root=tmp_path)
    try:
        observation, info = env.reset(options={"task_id": "builtin/L1/gelu"})
        guide = (env.workdir / "GUIDE.md").read_text()
        assert "your own Triton kernels" in observation and info["language"] == "triton"
        assert "@triton.jit" in guide and "REGISTER_BINDING" not in guide and "triton_interpreted" in guide
    finally:
        env.close()
    native = KernelEnv(backend="cpu").reset(options={"task_id": "builtin/L1/gelu"})[0]
    assert "load_kernels" in native and "@triton.jit" not in native and "your own C++ kernels" in native


def test_commands_take_the_language():
    from cuda_gym.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["run", "--language", "triton"]).language == "triton"
    assert parser.parse_args(["run"]).language == "cuda"
    agent = parser.parse_args(["agent", "--tasks", "builtin/L1/gelu", "--language", "triton"])
    assert agent.language == "triton"
    with pytest.raises(SystemExit):
        parser.parse_args(["agent", "--tasks", "builtin/L1/gelu", "--language", "rust"])


def test_worker_report_flags_interpreted_launches_and_adds_compile_seconds():
    """A CPU candidate that launched Triton kernels is flagged even when its source hides the import;
    on the GPU the compile seconds join the build's and nothing is flagged."""
    hidden = EvalResult("builtin/L1/gelu", "cpu", ErrorCode.OK, language="cuda", compile_seconds=0.5)
    triton_support.apply_report(hidden, {"launches": 3, "compile_s": 0.25})
    assert TRITON_INTERPRETED_FLAG in hidden.flags and hidden.compile_seconds == 0.75
    native = EvalResult("builtin/L1/gelu", "cpu", ErrorCode.OK, language="cuda")
    triton_support.apply_report(native, {"launches": 0, "compile_s": float("nan")})
    assert native.flags == [] and native.compile_seconds == 0.0
    gpu = EvalResult("builtin/L1/gelu", "cuda", ErrorCode.OK, language="triton", compile_seconds=1.0)
    triton_support.apply_report(gpu, {"launches": 5, "compile_s": 2.0})
    assert gpu.flags == [] and gpu.compile_seconds == 3.0
