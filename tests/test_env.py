"""KernelEnv: spaces, the action protocol, feedback, rewards, registration and vector envs (CPU)."""
from __future__ import annotations

import multiprocessing

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import cuda_gym
from cuda_gym.envs import ENV_SPECS, CompactResultInfo, KernelEnv, result_from_info
from cuda_gym.envs.prompt import trim_compile_log
from cuda_gym.eval import EvalConfig
from cuda_gym.eval.result import ErrorCode, EvalResult, TrialResult, result_keys
from cuda_gym.tasks import get_task, solution_path

from .fakes import CannedEvaluator, ok_result

TASK_ID = "builtin/L1/gelu"
CHEAP = EvalConfig(baselines=(), timing_reps=2, timing_min_reps=1, warmup_reps=0, timing_budget_s=0.2)
# Every stage runs (eager baseline included, no 20 s torch.compile baseline), with few repetitions.
QUICK = EvalConfig(baselines=("eager",), timing_reps=5, timing_min_reps=3, warmup_reps=1, timing_budget_s=0.3,
                   confirm_faster=False)

# A candidate that builds and runs but computes relu instead of gelu.
WRONG = '''import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(cpp=r"""
#include <cstdint>
extern "C" void run(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
""", functions=["void run(const float* x, float* y, int64_t n)"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _lib.run(x, y, x.numel())
        return y
'''
BROKEN = WRONG.replace("y[i] = x[i] > 0.f ? x[i] : 0.f;", "y[i] = x[i] > 0.f ? x[i] : ;")


def reference_solution() -> str:
    return solution_path(get_task(TASK_ID), "cpu").read_text()


def failed_result(task_id, code=ErrorCode.INCORRECT, compiled=True):
    return EvalResult(task_id=task_id, backend="cpu", error_code=code, message="trial 0 (task inputs): wrong",
                      compiled=compiled, trials=[TrialResult("task", False, 1.0, 1.0, 0.5, "wrong")])


# ---------------------------------------------------------------------------------- registration

def test_ids_are_registered_and_make_is_cheap():
    for env_id in ("CudaKernel-L1-v1", "CudaKernel-L2-v1", "CudaKernel-L3-v1", "CudaKernel-Ops6K-v1",
                   "CudaKernel-Builtin-v1", "CudaKernel-Builtin-L1-v1", "CudaKernel-Builtin-L2-v1",
                   "CudaKernel-Builtin-L3-v1"):
        assert env_id in gym.registry and env_id in ENV_SPECS
    cuda_gym.envs.register_envs()  # idempotent
    children = len(multiprocessing.active_children())
    env = gym.make("CudaKernel-Builtin-L2-v1", backend="cpu")
    assert env.unwrapped._evaluator is None
    assert {t.level for t in env.unwrapped.tasks} == {2}
    obs, info = env.reset(seed=3)  # a CPU env needs no evaluator for its prompt
    assert env.unwrapped._evaluator is None and len(multiprocessing.active_children()) == children
    assert info["level"] == 2 and info["backend"] == "cpu" and info["task_id"].startswith("builtin/L2/")
    env.close()
    assert len(gym.make("CudaKernel-Builtin-v1", backend="cpu").unwrapped.tasks) > len(env.unwrapped.tasks)


def test_every_id_is_at_the_current_version_and_an_old_one_names_it():
    from cuda_gym.envs.registration import SCHEDULE_ENV_SPECS, WORKSPACE_ENV_SPECS

    ids = [*ENV_SPECS, *SCHEDULE_ENV_SPECS, *WORKSPACE_ENV_SPECS]
    assert ids and all(env_id.endswith("-v1") for env_id in ids), ids
    with pytest.raises(gym.error.DeprecatedEnv, match="CudaKernel-Builtin-L1-v1"):
        gym.make("CudaKernel-Builtin-L1-v0", backend="cpu")


def test_check_env_passes():
    env = KernelEnv(suite="builtin", levels=1, backend="cpu", max_turns=4, eval_config=CHEAP)
    check_env(env)  # no spec: the determinism checks run too (random actions are invalid, so cheap)
    env.close()
    made = gym.make("CudaKernel-Builtin-L1-v1", backend="cpu", eval_config=CHEAP, max_turns=4)
    check_env(made.unwrapped)  # with a spec: render modes and close are checked as well
    made.close()


# ----------------------------------------------------------------------------------------- reset

def test_reset_picks_tasks_from_the_seeded_rng_and_by_id():
    env = KernelEnv(levels=(1, 2), backend="cpu")
    first = [env.reset(seed=7)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(4)]
    again = [env.reset(seed=7)[1]["task_id"]] + [env.reset()[1]["task_id"] for _ in range(4)]
    assert first == again and len(set(first)) > 1
    obs, info = env.reset(options={"task_id": TASK_ID})
    assert info == {"task_id": TASK_ID, "level": 1, "backend": "cpu", "max_turns": 8, "language": "cuda"}
    assert obs in env.observation_space
    # A task outside the env's levels can still be asked for by id; an unknown id is a KeyError.
    assert env.reset(options={"task_id": "builtin/L3/mlp"})[1]["level"] == 3
    with pytest.raises(KeyError, match="unknown task id"):
        env.reset(options={"task_id": "builtin/L1/nope"})


def test_cpu_prompt_has_task_target_rules_format_and_protocol():
    env = KernelEnv(backend="cpu", max_turns=5)
    obs, _ = env.reset(options={"task_id": TASK_ID})
    task = get_task(TASK_ID)
    assert task.source.strip().splitlines()[-1] in obs and "class Model(nn.Module)" in obs
    assert "Backend: cpu" in obs and "Hardware: CPU" in obs
    assert "batch_size = " in obs and "overridden" in obs  # the CPU sizes of the task
    assert "Policy: strict" in obs and "FORBIDDEN" in obs and "fp32" in obs and "TF32" in obs
    assert "Inputs must stay unchanged" in obs
    assert "load_kernels(" in obs and "cpp=r" in obs and "cuda=r" not in obs
    for command in ("#! compile", "#! check", "#! eval", "#! submit"):
        assert command in obs
    assert "5 turns" in obs


def test_cuda_prompt_uses_the_evaluators_backend_and_device():
    fake = CannedEvaluator(backend="cuda", device_name="NVIDIA H200")
    env = KernelEnv(evaluator=fake, precision="tf32", policy="permissive")
    obs, info = env.reset(options={"task_id": TASK_ID})
    assert info["backend"] == "cuda"
    assert "Backend: cuda" in obs and "GPU: NVIDIA H200" in obs
    assert "cuda=r" in obs and "cudaStream_t" in obs and "__global__" in obs
    assert "Policy: permissive" in obs and "Precision: tf32" in obs
    env.close()
    assert not fake.closed  # a shared evaluator belongs to its owner


# ---------------------------------------------------------------------------------------- actions

@pytest.mark.parametrize("action, needle", [
    (123, "must be a string"),
    (None, "must be a string"),
    ("", "empty"),
    ("   \n\n", "empty"),
    ("#! submit\n", "no candidate source"),
    ("#! deploy\nclass ModelNew: pass", "unknown command 'deploy'"),
    ("import torch\nprint('hello')", "ModelNew"),
    ("def broken(:\n  pass", "not valid Python"),
    ("x" * 100_001, "the limit is 100000"),
], ids=["int", "none", "empty", "blank", "no-source", "unknown-command", "no-modelnew", "syntax", "too-long"])
def test_malformed_actions_are_invalid_not_exceptions(action, needle):
    env = KernelEnv(backend="cpu", max_turns=3)
    env.reset(options={"task_id": TASK_ID})
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["verdict"] == "INVALID_ACTION" and needle in info["result"]["message"]
    assert obs in env.observation_space and "verdict: INVALID_ACTION" in obs and needle in obs
    assert "#! compile | #! check | #! eval | #! submit" in obs
    assert reward == -1.0 and not terminated and not truncated
    assert env._evaluator is None  # nothing was started for it


def test_commands_choose_the_evaluation_config():
    fake = CannedEvaluator(results=[lambda t: ok_result(t)] * 5)
    env = KernelEnv(evaluator=fake, max_turns=6)
    env.reset(options={"task_id": TASK_ID})
    source = "class ModelNew:\n    pass\n"
    sources = [source + f"# version {i}\n" for i in range(5)]  # distinct: a repeated source is not judged again
    env.step(sources[0])                                          # default: eval
    env.step("#! check\n" + sources[1])
    env.step("\n  #!compile\n" + sources[2])                      # blank lines and no space are fine
    env.step("Here it is:\n```python\n#! check\n" + sources[3] + "```\n")  # command opening the code block
    _, _, terminated, _, info = env.step("#! submit\n" + sources[4])
    configs = [call["config"] for call in fake.calls]
    assert configs[0] == fake.config and configs[4] == fake.config
    assert configs[1].baselines == () and configs[1].timing_reps == 1 and configs[1].warmup_reps == 0
    assert configs[1].correctness_trials == fake.config.correctness_trials
    assert configs[2].correctness_trials == 2 and configs[2].baselines == ()
    assert configs[3] == configs[1]
    assert [call["source"] for call in fake.calls] == sources
    assert all(call["backend"] is None for call in fake.calls)  # backend="auto": the evaluator's own
    assert terminated and info["command"] == "submit"
    with pytest.raises(RuntimeError, match="reset"):
        env.step(source)


def test_per_step_rewards_best_and_truncation():
    results = [lambda t: failed_result(t), lambda t: ok_result(t, ms=4.0, eager_ms=2.0),
               lambda t: ok_result(t, ms=1.0, eager_ms=2.0, compiled_ms=1.5),
               lambda t: ok_result(t, ms=3.0, eager_ms=4.0)]
    env = KernelEnv(evaluator=CannedEvaluator(results), max_turns=4)
    env.reset(options={"task_id": TASK_ID})
    source = "class ModelNew:\n    pass\n"
    steps = [env.step(source + "\n" * i) for i in range(4)]
    rewards = [s[1] for s in steps]
    assert rewards == [-1.0, 1.0, 3.0, 2.0]
    assert [s[3] for s in steps] == [False, False, False, True] and not any(s[2] for s in steps)
    best = steps[-1][4]["best"]
    assert best["found"] and best["turn"] == 3 and best["time_ms"] == 1.0 and best["speedup_vs_compile"] == 1.5
    assert best["candidate"] == source + "\n\n" and best["fully_timed"]
    assert steps[0][4]["best"] == {"found": False}
    assert "verdict: INCORRECT" in steps[0][0] and "trial 0 (task inputs)" in steps[0][0]
    assert "speedup x2" in steps[2][0] and "Best correct candidate so far: turn 3" in steps[3][0]
    assert "The episode is over." in steps[3][0]
    assert result_from_info(steps[2][4]["result"]).speedup_vs_compile == 1.5


def test_a_repeated_source_gets_the_episodes_first_verdict():
    # Re-submitting a candidate must not draw a luckier timing (or a second chance at a flaky one).
    fake = CannedEvaluator([lambda t: ok_result(t, ms=1.0, eager_ms=1.02), lambda t: ok_result(t, ms=0.5, eager_ms=1.02),
                          lambda t: ok_result(t, ms=0.5, eager_ms=1.02)])
    env = KernelEnv(evaluator=fake, max_turns=5)
    env.reset(options={"task_id": TASK_ID})
    source = "class ModelNew:\n    pass\n"
    first = env.step(source)
    again = env.step("#! eval\n" + source)
    assert len(fake.calls) == 1 and first[1] == again[1] == 1.0
    assert again[4]["result"]["flags"] == ["repeated_candidate"] and first[4]["result"]["flags"] == []
    env.step("#! check\n" + source)  # another judge: judged
    assert len(fake.calls) == 2
    env.reset(options={"task_id": TASK_ID})  # a new episode judges again
    assert env.step(source)[1] == 2.0 and len(fake.calls) == 3


def test_final_reward_mode():
    source = "class ModelNew:\n    pass\n"
    # The best of the evaluated candidates, paid once at the end.
    env = KernelEnv(evaluator=CannedEvaluator([lambda t: ok_result(t, ms=1.0, eager_ms=2.0), failed_result]),
                    reward_mode="final", max_turns=3)
    env.reset(options={"task_id": TASK_ID})
    assert env.step(source)[1] == 0.0
    obs, reward, terminated, truncated, _ = env.step(source)
    assert reward == 0.0 and "Reward" not in obs
    obs, reward, terminated, truncated, _ = env.step("#! submit\n" + source)
    assert (reward, terminated, truncated) == (2.0, True, False) and "Reward: 2" in obs
    # Only check results: they count (correct, speed unknown). Nothing judged: a failure.
    env = KernelEnv(evaluator=CannedEvaluator([lambda t: ok_result(t, eager_ms=None)]), reward_mode="final",
                    max_turns=2)
    env.reset(options={"task_id": TASK_ID})
    env.step("#! check\n" + source)
    assert env.step("not a candidate")[1:4] == (1.0, False, True)
    env = KernelEnv(backend="cpu", reward_mode="final", max_turns=1, reward="log_speedup")
    env.reset(options={"task_id": TASK_ID})
    assert env.step("garbage")[1:4] == (-1.0, False, True)


def test_compile_reports_only_the_build():
    env = KernelEnv(evaluator=CannedEvaluator([failed_result]), max_turns=3)
    env.reset(options={"task_id": TASK_ID})
    obs, reward, *_, info = env.step("#! compile\nclass ModelNew:\n    pass\n")
    assert "verdict: COMPILED" in obs and "trial" not in obs and reward == 0.0
    assert "FORBIDDEN" in obs  # no native code under the strict policy: warned
    assert info["verdict"] == "INCORRECT"  # info keeps the whole evaluation


def test_trim_compile_log_keeps_the_errors_only():
    log = """RuntimeError: Error building extension 'cg_x': [1/2] /usr/local/cuda/bin/nvcc -c /root/.cache/cuda_gym/kernels/cg_x/kernels.cu -o kernels.cuda.o -O3
FAILED: kernels.cuda.o
/usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /root/.cache/cuda_gym/kernels/cg_x/kernels.cu -O3
/root/.cache/cuda_gym/kernels/cg_x/kernels.cu(12): error: identifier "blockIdxx" is undefined
      int i = blockIdxx.x * blockDim.x + threadIdx.x;
              ^

/root/.cache/cuda_gym/kernels/cg_x/kernels.cu(20): warning #177-D: variable "unused" was declared but never referenced
1 error detected in the compilation of "/root/.cache/cuda_gym/kernels/cg_x/kernels.cu".
ninja: build stopped: subcommand failed.
"""
    trimmed = trim_compile_log(log)
    assert 'kernels.cu(12): error: identifier "blockIdxx" is undefined' in trimmed
    assert "blockIdxx.x * blockDim.x" in trimmed and "^" in trimmed
    assert "nvcc" not in trimmed and "/root/.cache" not in trimmed and "warning" not in trimmed
    assert trim_compile_log("something odd happened\nno recognizable line") .endswith("no recognizable line")


# ------------------------------------------------------------------------ real evaluations (CPU)

@pytest.mark.slow
def test_scripted_episode_on_cpu(cpu_evaluator):
    env = gym.make("CudaKernel-Builtin-L1-v1", backend="cpu", evaluator=cpu_evaluator, eval_config=QUICK,
                   max_turns=4)
    obs, info = env.reset(seed=0, options={"task_id": TASK_ID})
    assert info["task_id"] == TASK_ID

    obs, reward, terminated, truncated, info = env.step("#! check\n" + WRONG)
    assert info["verdict"] == "INCORRECT" and reward == -1.0 and not (terminated or truncated)
    assert "verdict: INCORRECT" in obs and "trial 0 (task inputs)" in obs and "Turns left: 3" in obs

    obs, reward, terminated, truncated, info = env.step("#! compile\n" + BROKEN)
    assert info["verdict"] == "COMPILE_ERROR" and reward == -1.0 and not (terminated or truncated)
    assert "verdict: COMPILE_ERROR" in obs and "error:" in obs and "x[i] : ;" in obs
    assert "-MMD" not in obs and "ninja" not in obs  # the command lines are not shown

    obs, reward, terminated, truncated, info = env.step("#! submit\n" + reference_solution())
    assert info["verdict"] == "OK", obs
    assert reward >= 1.0 and terminated and not truncated
    assert "verdict: OK" in obs and "PyTorch eager:" in obs and "The episode is over." in obs
    assert info["best"]["found"] and info["best"]["turn"] == 3 and info["best"]["time_ms"] > 0
    result = result_from_info(info["result"])
    assert result.correct and result.speedup_vs_eager is not None
    assert obs in env.observation_space
    env.close()


def test_final_mode_with_a_real_check(cpu_evaluator):
    env = KernelEnv(backend="cpu", evaluator=cpu_evaluator, eval_config=QUICK, reward_mode="final", max_turns=2)
    env.reset(options={"task_id": TASK_ID})
    obs, reward, _, truncated, info = env.step("#! check\n" + reference_solution())
    assert info["verdict"] == "OK" and reward == 0.0 and not truncated and "rough" in obs
    _, reward, terminated, truncated, _ = env.step("no model here")
    assert reward == 1.0 and truncated and not terminated


@pytest.mark.parametrize("invalid_first", [False, True])
def test_sync_vector_env_stacks_mixed_infos_of_compacted_results(invalid_first):
    fake = CannedEvaluator([lambda t: ok_result(t)])
    envs = SyncVectorEnv([lambda: CompactResultInfo(KernelEnv(evaluator=fake, max_turns=2)) for _ in range(2)])
    envs.reset(seed=1, options={"task_id": TASK_ID})
    actions = ["class ModelNew:\n    pass\n", 7]
    order = slice(None, None, -1) if invalid_first else slice(None)
    obs, rewards, terminated, truncated, infos = envs.step(tuple(actions[order]))
    assert list(infos["verdict"]) == ["OK", "INVALID_ACTION"][order]
    assert list(rewards) == [2.0, -1.0][order] and not terminated.any() and not truncated.any()
    assert list(infos["result"]["_candidate_time"]) == [True, False][order]  # absent keys are masked
    assert list(infos["best"]["found"]) == [True, False][order]
    envs.close()


def test_info_result_has_every_key_for_every_verdict():
    env = KernelEnv(evaluator=CannedEvaluator([lambda t: ok_result(t)]), max_turns=3)
    env.reset(options={"task_id": TASK_ID})
    ok_info = env.step("class ModelNew:\n    pass\n")[4]
    invalid_info = env.step("not python (")[4]
    assert (ok_info["verdict"], invalid_info["verdict"]) == ("OK", "INVALID_ACTION")
    assert list(ok_info["result"]) == list(invalid_info["result"]) == list(result_keys())
    assert invalid_info["result"]["speedup_vs_compile"] is None and invalid_info["result"]["candidate_time"] is None
    assert result_from_info(invalid_info["result"]).error_code is ErrorCode.INVALID_ACTION


@pytest.mark.slow
def test_async_vector_env_runs_a_step_on_cpu(cache_dir):
    def make():
        return gym.make("CudaKernel-Builtin-L1-v1", backend="cpu", eval_config=CHEAP, cache_dir=cache_dir,
                        task_filter=[TASK_ID], max_turns=2)

    # Text observations need shared_memory=False: gymnasium reads non-Box shared memory only once
    # (Farama-Foundation/Gymnasium#1164), so with it every observation would be the initial buffer.
    envs = AsyncVectorEnv([make, make], shared_memory=False)
    try:
        obs, infos = envs.reset(seed=0)
        assert list(infos["task_id"]) == [TASK_ID, TASK_ID] and len(obs) == 2
        obs, rewards, terminated, truncated, infos = envs.step(("#! check\n" + reference_solution(), "oops"))
        assert list(infos["verdict"]) == ["OK", "INVALID_ACTION"], obs[0]
        assert rewards.tolist() == [1.0, -1.0] and not terminated.any() and not truncated.any()
        assert "verdict: OK" in obs[0] and "verdict: INVALID_ACTION" in obs[1]
    finally:
        envs.close()
    assert np.all(envs.closed)
