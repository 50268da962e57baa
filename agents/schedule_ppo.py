"""stable-baselines3 PPO and sb3-contrib MaskablePPO on the schedule environments, and random search
at the same evaluation budget.

    env = ScheduleEnv(suite="builtin", task_filter="builtin/L2/linear_gelu", backend="cpu")
    ppo = train(env, SchedulePPOConfig(algorithm="maskable_ppo", budget=48), out_dir="runs/ppo")
    rnd = random_search(env, budget=48, seed=0)
    report = compare_curves({"random": rnd, "maskable_ppo": ppo["curve"]})

The budget counts environment steps: each step asks the evaluator for one configuration's verdict
(a configuration judged before is served from the environment's cache and marked `cached`). Every
step is recorded (`StepRecord`), so a curve is the running best reward over steps. `train` saves SB3
checkpoints every rollout under `<out_dir>/checkpoints/` and the final model as `<out_dir>/model.zip`.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

ALGORITHMS = ("maskable_ppo", "ppo")


@dataclass
class SchedulePPOConfig:
    """PPO's settings (SB3's names); the defaults suit a contextual bandit of a few dozen evaluations."""
    algorithm: str = "maskable_ppo"   # "maskable_ppo" (sb3-contrib, reads action_masks) or "ppo" (SB3)
    budget: int = 48                  # environment steps (evaluation requests) to train for
    n_steps: int = 8                  # steps per rollout; one update (n_epochs passes) per rollout
    batch_size: int = 8
    n_epochs: int = 10
    learning_rate: float = 3e-4
    gamma: float = 0.99               # irrelevant for one-step episodes (the return is the reward)
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    ent_coef: float = 0.01
    net_arch: tuple[int, ...] = (64, 64)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.n_steps < 2 or self.batch_size < 2:
            raise ValueError("n_steps and batch_size must be >= 2 (SB3 normalises advantages over a batch)")


@dataclass
class StepRecord:
    """One environment step as a curve sees it."""
    step: int
    task_id: str
    action: list[int]
    reward: float
    correct: bool
    error_code: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    cached: bool


class StepRecorder(gym.Wrapper):
    """Records every step of the wrapped schedule environment (`records`); passes `action_masks` through."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.records: list[StepRecord] = []

    def action_masks(self) -> np.ndarray:
        return self.env.get_wrapper_attr("action_masks")()

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        result = info["result"]
        self.records.append(StepRecord(len(self.records) + 1, info["task_id"], list(info["action"]), float(reward),
                                       bool(result.get("correct", False)), str(result.get("error_code")),
                                       result.get("speedup_vs_eager"), result.get("speedup_vs_compile"),
                                       bool(self.env.get_wrapper_attr("last_step_cached"))))
        return observation, reward, terminated, truncated, info


def _algorithm_class(name: str) -> Any:
    if name == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    from stable_baselines3 import PPO

    return PPO


def train(env: gym.Env, config: SchedulePPOConfig = SchedulePPOConfig(), out_dir: str | Path | None = None,
          progress_bar: bool = False) -> dict[str, Any]:
    """Train PPO / MaskablePPO for `config.budget` steps; returns {"curve": [StepRecord], "model": path|None}."""
    from stable_baselines3.common.callbacks import CheckpointCallback

    recorder = StepRecorder(env)
    cls = _algorithm_class(config.algorithm)
    # SB3 collects whole rollouts: a rollout longer than the budget would judge configurations the curve drops.
    n_steps = max(2, min(config.n_steps, config.budget))
    batch_size = min(config.batch_size, n_steps)
    model = cls("MlpPolicy", recorder, n_steps=n_steps, batch_size=batch_size, n_epochs=config.n_epochs,
                learning_rate=config.learning_rate, gamma=config.gamma, gae_lambda=config.gae_lambda,
                clip_range=config.clip_range, ent_coef=config.ent_coef, seed=config.seed, verbose=0,
                policy_kwargs={"net_arch": list(config.net_arch)}, device="cpu")
    callbacks = []
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        callbacks.append(CheckpointCallback(save_freq=n_steps, save_path=str(out / "checkpoints"),
                                            name_prefix=config.algorithm))
    # The budget is rounded up to whole rollouts; the curve is cut at the budget.
    model.learn(total_timesteps=config.budget, callback=callbacks or None, progress_bar=progress_bar)
    model_path = None
    if out_dir is not None:
        model_path = str(Path(out_dir) / "model.zip")
        model.save(model_path)
    return {"curve": recorder.records[:config.budget], "model": model_path, "policy": model}


def random_search(env: gym.Env, budget: int, seed: int = 0) -> list[StepRecord]:
    """`budget` steps, each a configuration drawn uniformly from the allowed values of every knob."""
    recorder = StepRecorder(env)
    rng = random.Random(seed)
    recorder.reset(seed=seed)
    while len(recorder.records) < budget:
        mask = recorder.action_masks()
        nvec = env.action_space.nvec
        action, start = [], 0
        for n in nvec:
            allowed = [i for i in range(int(n)) if mask[start + i]]
            action.append(rng.choice(allowed))
            start += int(n)
        _, _, terminated, truncated, _ = recorder.step(np.asarray(action))
        if terminated or truncated:
            recorder.reset()
    return recorder.records


def running_best(curve: Sequence[StepRecord]) -> list[float]:
    best, out = -math.inf, []
    for record in curve:
        best = max(best, record.reward)
        out.append(best)
    return out


def steps_to_reach(curve: Sequence[StepRecord], target: float) -> int | None:
    """The first step whose running best is at least `target` (None if never)."""
    for index, best in enumerate(running_best(curve), start=1):
        if best >= target - 1e-12:
            return index
    return None


def compare_curves(curves: dict[str, Sequence[StepRecord]], baseline: str = "random") -> dict[str, Any]:
    """Per method: final best reward, distinct configurations judged, and the step (and budget fraction)
    at which it reached the baseline's final best."""
    target = running_best(curves[baseline])[-1] if curves.get(baseline) else None
    report: dict[str, Any] = {"baseline": baseline, "baseline_final_best_reward": target, "methods": {}}
    for name, curve in curves.items():
        reached = steps_to_reach(curve, target) if target is not None else None
        report["methods"][name] = {
            "steps": len(curve),
            "final_best_reward": running_best(curve)[-1] if curve else None,
            "distinct_configurations": len({tuple(r.action) for r in curve}),
            "correct_steps": sum(r.correct for r in curve),
            "steps_to_reach_baseline_best": reached,
            "budget_fraction_to_reach_baseline_best": reached / len(curve) if reached and curve else None,
        }
    return report


def write_curves(path_json: str | Path, path_png: str | Path | None, curves: dict[str, Sequence[StepRecord]],
                 meta: dict[str, Any], comparison: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the curves and their comparison (default: `compare_curves(curves)`) as JSON, and (with
    matplotlib) the running-best plot as PNG."""
    report = comparison if comparison is not None else compare_curves(curves)
    payload = {**meta, "comparison": report,
               "curves": {name: [asdict(r) for r in curve] for name, curve in curves.items()},
               "running_best": {name: running_best(curve) for name, curve in curves.items()}}
    Path(path_json).parent.mkdir(parents=True, exist_ok=True)
    Path(path_json).write_text(json.dumps(payload, indent=1))
    if path_png is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, curve in curves.items():
            ax.step(range(1, len(curve) + 1), running_best(curve), where="post", label=name)
        ax.set_xlabel("evaluation requests (environment steps)")
        ax.set_ylabel("best reward so far (log speedup)")
        ax.set_title(str(meta.get("title", "schedule env: PPO vs random search")))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path_png, dpi=120)
        plt.close(fig)
    return report
