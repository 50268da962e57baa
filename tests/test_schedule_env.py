"""ScheduleEnv: Gymnasium and SB3 API checks, masks, canonical actions, the result cache, and short
SB3 PPO / MaskablePPO runs, all on the CPU backend with the session's evaluator."""
from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from cuda_gym_agents.schedule_ppo import SchedulePPOConfig, StepRecord, compare_curves, random_search, train, write_curves
from cuda_gym.envs.registration import SCHEDULE_ENV_SPECS
from cuda_gym.envs.schedule_env import FEATURES, ScheduleEnv

TASK = "builtin/L1/argmax_dim"  # one argreduce stage: 4 configurations on the CPU, so the module judges <= 4


@pytest.fixture(scope="module")
def env(cpu_evaluator):
    environment = ScheduleEnv(suite="builtin", task_filter=TASK, backend="cpu", evaluator=cpu_evaluator)
    yield environment
    environment.close()


def test_schedule_ids_are_registered():
    import cuda_gym  # noqa: F401 - registers

    for env_id in ("CudaSchedule-Builtin-v1", "CudaSchedule-L1-v1", "CudaSchedule-L2-v1"):
        assert env_id in gym.registry and env_id in SCHEDULE_ENV_SPECS
        assert gym.registry[env_id].entry_point == "cuda_gym.envs.schedule_env:ScheduleEnv"


def test_builtin_env_covers_most_builtin_tasks(cpu_evaluator):
    environment = ScheduleEnv(suite="builtin", backend="cpu", evaluator=cpu_evaluator)
    assert len(environment.tasks) >= 40, environment.skipped
    assert "builtin/L1/cumsum" in environment.skipped  # a scan: no template
    observation, info = environment.reset(seed=3)
    assert environment.observation_space.contains(observation)
    assert info["task_id"] in environment.plans


def test_gymnasium_check_env(env):
    from gymnasium.utils.env_checker import check_env

    check_env(env, skip_render_check=True)


def test_sb3_check_env(env):
    from stable_baselines3.common.env_checker import check_env

    check_env(env, warn=True)


def test_masks_canonical_actions_and_cache(env):
    observation, info = env.reset(seed=0, options={"task_id": TASK})
    assert observation.shape == (len(FEATURES),)
    mask = env.action_masks()
    assert mask.shape == (int(env.action_space.nvec.sum()),) and mask.dtype == bool
    names = [k.name for k in env.knobs]
    # a GEMM knob does not apply to an elementwise task: only its default is allowed
    start = sum(int(n) for n in env.action_space.nvec[:names.index("gemm_mc")])
    gemm_mask = mask[start:start + int(env.action_space.nvec[names.index("gemm_mc")])]
    assert gemm_mask.sum() == 1
    action = np.zeros(len(names), dtype=np.int64)
    action[names.index("gemm_mc")] = 3            # masked out: judged as the default
    first = env.step(action)
    assert first[4]["action"][names.index("gemm_mc")] == env.knobs[names.index("gemm_mc")].default
    assert first[2] is True                       # one-step episodes (contextual bandit)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step(action)
    before = env.evaluations
    env.reset(seed=0, options={"task_id": TASK})
    second = env.step(action)
    assert env.last_step_cached is True and env.evaluations == before
    assert second[1] == first[1]
    assert first[4]["result"]["correct"] is True
    assert first[0][-3] == 0.0                     # last_compile_failed
    env.reset(seed=0)
    with pytest.raises(ValueError, match="one per knob"):
        env.step(np.zeros(len(names) + 1, dtype=np.int64))


def test_unknown_task_id_names_the_reason(env):
    with pytest.raises(KeyError, match="not in this environment"):
        env.reset(options={"task_id": "builtin/L1/cumsum"})


def test_short_sb3_training_runs(env, tmp_path):
    masked = train(env, SchedulePPOConfig(algorithm="maskable_ppo", budget=4, n_steps=4, batch_size=4, n_epochs=2),
                   out_dir=tmp_path / "maskable")
    assert len(masked["curve"]) == 4
    assert (tmp_path / "maskable" / "model.zip").exists()
    assert list((tmp_path / "maskable" / "checkpoints").glob("maskable_ppo_*_steps.zip"))
    plain = train(env, SchedulePPOConfig(algorithm="ppo", budget=2, n_steps=2, batch_size=2, n_epochs=1))
    assert len(plain["curve"]) == 2
    assert all(r.task_id == TASK for r in masked["curve"] + plain["curve"])
    # the trained policy acts within the mask
    env.reset(seed=1)
    action, _ = masked["policy"].predict(env.reset(seed=1)[0], action_masks=env.action_masks())
    assert env._space.valid(tuple(int(a) for a in action))


def test_random_search_and_comparison(env, tmp_path):
    curve = random_search(env, budget=3, seed=5)
    assert len(curve) == 3 and all(r.correct for r in curve)
    report = write_curves(tmp_path / "c.json", tmp_path / "c.png", {"random": curve, "again": curve}, {"task": TASK})
    assert report["methods"]["again"]["steps_to_reach_baseline_best"] <= 3
    assert json.loads((tmp_path / "c.json").read_text())["comparison"]["baseline"] == "random"
    assert (tmp_path / "c.png").stat().st_size > 1000


def _record(step, reward):
    return StepRecord(step, "t", [0], reward, True, "OK", 1.0, None, False)


def test_compare_curves_counts_steps_to_reach_the_baseline_best():
    random_curve = [_record(1, 0.1), _record(2, 0.5), _record(3, 0.2), _record(4, 0.3)]
    ppo_curve = [_record(1, 0.0), _record(2, 0.6), _record(3, 0.6), _record(4, 0.6)]
    slow_curve = [_record(i, 0.1) for i in range(1, 5)]
    report = compare_curves({"random": random_curve, "ppo": ppo_curve, "slow": slow_curve})
    assert report["baseline_final_best_reward"] == 0.5
    assert report["methods"]["ppo"]["steps_to_reach_baseline_best"] == 2
    assert report["methods"]["ppo"]["budget_fraction_to_reach_baseline_best"] == 0.5
    assert report["methods"]["slow"]["steps_to_reach_baseline_best"] is None
    assert report["methods"]["random"]["distinct_configurations"] == 1
