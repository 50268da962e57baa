"""The non-LLM reference agent: plans a task onto the csrc/ templates (`cuda_gym.schedule`) and tunes
its knobs, the default configuration first, then random search or a trained SB3 policy's choices.

    best = TemplateAgent(evaluator, backend="cuda").solve(task, budget=8)

The planner, knob spaces and renderer live in `cuda_gym.schedule`, because the schedule environment
needs them too; they are re-exported here for the agent's callers.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from cuda_gym.schedule import (CPU_KNOBS, CUDA_KNOBS, CUDNN_KINDS, TEMPLATE_DIR_ENV, V, Buffer, Knob, KnobSpace,
                               Operand, Plan, Stage, Unsupported, broadcast_terms, expr_to_c, knobs_for, plan_task,
                               read_template, render_candidate, render_kernels, template_dir, trace_task)

__all__ = [
    "Trial", "TaskSolution", "PendingSolution", "PolicyFactory", "TemplateAgent", "sb3_policy",
    # re-exported from cuda_gym.schedule
    "CPU_KNOBS", "CUDA_KNOBS", "CUDNN_KINDS", "TEMPLATE_DIR_ENV", "V", "Buffer", "Knob", "KnobSpace", "Operand",
    "Plan", "Stage", "Unsupported", "broadcast_terms", "expr_to_c", "knobs_for", "plan_task", "read_template",
    "render_candidate", "render_kernels", "template_dir", "trace_task",
]


@dataclass
class Trial:
    """One evaluated configuration."""
    action: tuple[int, ...]
    knobs: dict[str, Any]
    result: Any                 # EvalResult


@dataclass
class TaskSolution:
    """What the agent found for one task: the best trial (correct first, then faster), all trials, or why none."""
    task_id: str
    level: int
    plan_error: str | None = None
    trials: list[Trial] = field(default_factory=list)
    best: Trial | None = None
    best_source: str | None = None


def _rank(result: Any) -> tuple:
    speed = result.speedup_vs_compile or result.speedup_vs_eager or 0.0
    return (bool(result.correct), speed)


@dataclass
class PendingSolution:
    """Configurations of one task handed to the evaluator (`TemplateAgent.submit`); `finish` collects them."""
    solution: TaskSolution
    plan: Plan | None = None
    space: KnobSpace | None = None
    futures: list[tuple[tuple[int, ...], dict[str, Any], str, Any]] = field(default_factory=list)


PolicyFactory = Callable[[Plan, Any, KnobSpace], Callable[[], Sequence[int]]]


class TemplateAgent:
    """Plans each task onto the templates and tunes its knobs: the default configuration first, then
    random configurations, or a trained SB3 policy's choices (`policy=`: a factory that, given the plan,
    task and knob space, returns a callable proposing one action), up to `budget` evaluations per task.
    Evaluations go through the given Evaluator (its build and baseline caches apply); `submit` queues a
    task's configurations without waiting, so many tasks' builds overlap."""

    def __init__(self, evaluator: Any, backend: str, *, seed: int = 0, eval_config: Any = None):
        if backend not in ("cuda", "cpu"):
            raise ValueError(f"backend must be 'cuda' or 'cpu', got {backend!r}")
        self.evaluator = evaluator
        self.backend = backend
        self.rng = random.Random(seed)
        self.eval_config = eval_config

    def configurations(self, space: KnobSpace, budget: int, propose: Callable[[], Sequence[int]] | None = None,
                       exclude: Sequence[tuple[int, ...]] = ()) -> list[tuple[int, ...]]:
        """Up to `budget` distinct valid actions not in `exclude`: the default first, then proposals
        (random ones without `propose`)."""
        seen = set(exclude)
        chosen: list[tuple[int, ...]] = []
        if space.default() not in seen:
            chosen.append(space.default())
            seen.add(space.default())
        limit = min(budget, space.size() - len(set(exclude)))
        attempts = 0
        while len(chosen) < limit and attempts < 50 * max(budget, 1):
            attempts += 1
            action = space.canonical(propose()) if propose is not None else space.sample(self.rng)
            if action not in seen:
                seen.add(action)
                chosen.append(action)
        return chosen

    def submit(self, task: Any, budget: int = 1, policy: PolicyFactory | None = None,
               previous: TaskSolution | None = None) -> PendingSolution:
        """Plan `task` and queue `budget` new configurations (beyond those `previous` already judged)."""
        solution = previous or TaskSolution(task.id, task.level)
        pending = PendingSolution(solution)
        if solution.plan_error is not None:
            return pending
        try:
            plan = plan_task(task, self.backend)
        except Unsupported as exc:
            solution.plan_error = str(exc)
            return pending
        except Exception as exc:  # noqa: BLE001 - a reference that fails to build or trace is not covered
            solution.plan_error = f"planning failed: {type(exc).__name__}: {str(exc)[:300]}"
            return pending
        space = KnobSpace.for_plan(plan)
        pending.plan, pending.space = plan, space
        propose = policy(plan, task, space) if policy is not None else None
        for action in self.configurations(space, budget, propose, exclude=[t.action for t in solution.trials]):
            knobs = space.values(action)
            source = render_candidate(plan, knobs)
            future = self.evaluator.submit(task, source, backend=self.backend, config=self.eval_config)
            pending.futures.append((action, knobs, source, future))
        return pending

    @staticmethod
    def finish(pending: PendingSolution) -> TaskSolution:
        """Wait for the queued configurations; keep the best (correct first, then fastest)."""
        solution = pending.solution
        for action, knobs, source, future in pending.futures:
            trial = Trial(action, knobs, future.result())
            solution.trials.append(trial)
            if solution.best is None or _rank(trial.result) > _rank(solution.best.result):
                solution.best, solution.best_source = trial, source
        pending.futures = []
        return solution

    def solve(self, task: Any, budget: int = 1, policy: PolicyFactory | None = None) -> TaskSolution:
        return self.finish(self.submit(task, budget, policy))


def sb3_policy(model_path: str, deterministic: bool = False) -> PolicyFactory:
    """A policy factory from a saved SB3 PPO / MaskablePPO model (agents/schedule_ppo.py trains them)."""
    from cuda_gym.envs.schedule_env import plan_features

    try:
        from sb3_contrib import MaskablePPO

        model = MaskablePPO.load(model_path, device="cpu")
        masked = True
    except Exception:  # noqa: BLE001 - not a MaskablePPO file: try plain PPO
        from stable_baselines3 import PPO

        model = PPO.load(model_path, device="cpu")
        masked = False

    trained_nvec = [int(n) for n in getattr(model.action_space, "nvec", [])]

    def check_space(space: KnobSpace) -> None:
        """Raises ValueError when the model was trained on another knob space than `space`."""
        if trained_nvec != list(space.nvec):
            raise ValueError(f"the SB3 model {model_path} acts on {len(trained_nvec)} knobs {trained_nvec}, but the "
                             f"knob space has {len(space.nvec)} {list(space.nvec)} "
                             f"({', '.join(k.name for k in space.knobs)}); it was trained on another knob space: "
                             "train a new one with agents/schedule_ppo.py")

    def factory(plan: Plan, task: Any, space: KnobSpace) -> Callable[[], Sequence[int]]:
        import numpy as np

        check_space(space)
        observation = plan_features(plan, task.level)
        mask = np.asarray(space.flat_mask(), dtype=bool)

        def propose() -> Sequence[int]:
            if masked:
                action, _ = model.predict(observation, deterministic=deterministic, action_masks=mask)
            else:
                action, _ = model.predict(observation, deterministic=deterministic)
            return [int(a) for a in action]

        return propose

    factory.trained_nvec = trained_nvec
    factory.check_space = check_space
    return factory
