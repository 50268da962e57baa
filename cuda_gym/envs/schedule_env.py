"""`ScheduleEnv`: tune the knobs of csrc/ template kernels for a task (a MultiDiscrete action space).

One episode = one task (a contextual bandit by default: `episode_steps=1`). The task's reference is
planned onto the templates by the schedule planner (`cuda_gym.schedule.plan_task`); tasks it does
not cover are left out of the environment (`env.skipped` says why). An action picks one value per
knob (`env.knobs`: block sizes, items per thread, vector widths, GEMM/conv tiles, cuBLAS or tiled
GEMM, epilogue fusion on or off); `step` renders the full `ModelNew` from the templates and judges it
with the same `Evaluator` as `KernelEnv` (results are cached by (task, rendered kernels), so a repeated
configuration, or one whose extra knobs change nothing, costs nothing and returns the same verdict;
`env.last_step_cached` says which).

Observation (`Box(float32)`, see `FEATURES`): the plan's stage kinds (counts), log2 sizes (output,
inputs, the largest GEMM's M/N/K, the largest reduced axis, conv GEMM dims), the level, and the last
step's log speedup, compile-failure and incorrect flags.
Reward: `"log_speedup"` (log of the speedup vs torch.compile, else vs eager; -1 when not correct) by
default, `"milestone"`, or a callable `(EvalResult, history) -> float`.
Masks: `action_masks()` (sb3-contrib's MaskablePPO reads it) gives one flat boolean vector, the
knobs' values in order; a knob that no stage of the task reads allows only its default, cuBLAS is
masked where the operands' strides rule it out. An unmasked action outside the mask is not an
error: each masked-out value is replaced by the knob's default (`info["action"]` is the action
judged), so plain PPO can act in it too.
"""
from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Callable, Iterable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..eval.config import EvalConfig
from ..eval.result import ErrorCode, EvalResult
from ..eval.reward import get_reward
from ..tasks.degenerate import without_degenerate
from ..tasks.suites import load_suite
from ..tasks.task import Task

STAGE_KINDS = ("elementwise", "gemm", "conv", "conv_direct", "conv_transpose", "pool", "reduce", "argreduce", "norm")
FEATURES = tuple(f"count_{k}" for k in STAGE_KINDS) + (
    "log2_output_numel", "log2_input_numel", "log2_gemm_m", "log2_gemm_n", "log2_gemm_k", "log2_reduce_len",
    "log2_conv_m", "log2_conv_n", "log2_conv_k", "stages", "level", "last_log_speedup", "last_compile_failed",
    "last_incorrect", "steps_taken",
)
_COMPILE_FAILURES = {ErrorCode.COMPILE_ERROR, ErrorCode.COMPILE_TIMEOUT}


def _log2(x: float) -> float:
    return math.log2(1.0 + max(float(x), 0.0))


def plan_features(plan: Any, level: int) -> np.ndarray:
    """The static part of the observation for one plan (the last-step features are zero)."""
    kinds = [s.kind for s in plan.stages]
    gemm = max((s for s in plan.stages if s.kind == "gemm"),
               key=lambda s: s.params["M"] * s.params["N"] * s.params["K"], default=None)
    reduce_len = max((s.params["R"] for s in plan.stages if s.kind in ("reduce", "argreduce", "norm")), default=0)
    conv_dims = (0, 0, 0)
    for s in plan.stages:
        if s.kind in ("conv", "conv_direct", "conv_transpose"):
            p = s.params["shape"]
            dims = (p["n"] * p["od"] * p["oh"] * p["ow"], p["oc"] // p["groups"],
                    p["c"] // p["groups"] * p["kd"] * p["kh"] * p["kw"])
            if math.prod(dims) > math.prod(conv_dims):
                conv_dims = dims
    values = [min(kinds.count(k), 8) for k in STAGE_KINDS]
    values += [_log2(sum(math.prod(b.shape) for b in plan.outputs)), _log2(sum(b.numel for b in plan.inputs))]
    values += [_log2(gemm.params[d]) if gemm else 0.0 for d in ("M", "N", "K")]
    values += [_log2(reduce_len), *(_log2(d) for d in conv_dims), min(len(kinds), 32), level, 0.0, 0.0, 0.0, 0.0]
    return np.asarray(values, dtype=np.float32)


class ScheduleEnv(gym.Env):
    """Choose template knobs for a task's planned kernels; reward from the evaluator's verdict.

    Action: `MultiDiscrete([len(k.values) for k in env.knobs])` (the backend's knobs).
    Observation: `Box(low=-8, high=64, shape=(len(FEATURES),), float32)`.
    `reset(options={"task_id": ...})` picks a task; otherwise one is drawn with the env's RNG.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        suite: str = "builtin",
        levels: int | Iterable[int] | None = None,
        task_filter: Callable[[Task], bool] | Iterable[str] | str | None = None,
        include_degenerate: bool = False,
        backend: str = "auto",
        reward: str | Callable[..., float] = "log_speedup",
        episode_steps: int = 1,
        eval_config: EvalConfig | None = None,
        evaluator: Any = None,
        data_path: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        render_mode: str | None = None,
        judge_url: str | None = None,
        judge_token: str | None = None,
    ) -> None:
        super().__init__()
        if backend not in ("auto", "cuda", "cpu"):
            raise ValueError(f"backend must be 'auto', 'cuda' or 'cpu', got {backend!r}")
        if int(episode_steps) < 1:
            raise ValueError(f"episode_steps must be >= 1, got {episode_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}")
        from ..schedule import KnobSpace, Unsupported, knobs_for, plan_task

        self._knob_space_for = KnobSpace.for_plan
        self._render = None
        self.render_mode = render_mode
        self.reward_fn = get_reward(reward)
        self.episode_steps = int(episode_steps)
        self.config = eval_config or getattr(evaluator, "config", None) or EvalConfig()
        self.cache_dir = cache_dir
        if judge_url and evaluator is not None:
            raise ValueError("pass evaluator or judge_url, not both")
        self.judge_url, self.judge_token = judge_url, judge_token
        self._evaluator = evaluator
        self._owns_evaluator = evaluator is None
        self._closed = False
        if backend == "auto":
            backend = self.evaluator.backend
        self.backend = backend
        self.knobs = knobs_for(backend)

        if isinstance(levels, int):
            levels = (levels,)
        kwargs = {"data_path": data_path} if suite != "builtin" and data_path is not None else {}
        tasks = load_suite(suite, levels=tuple(levels) if levels is not None else None, **kwargs)
        tasks = without_degenerate(tasks, task_filter) if not include_degenerate else tasks
        if task_filter is not None:
            if callable(task_filter):
                tasks = [t for t in tasks if task_filter(t)]
            else:
                wanted = {task_filter} if isinstance(task_filter, str) else set(task_filter)
                missing = wanted - {t.id for t in tasks}
                if missing:
                    raise KeyError(f"task_filter names tasks suite {suite!r} does not have: {sorted(missing)[:5]}")
                tasks = [t for t in tasks if t.id in wanted]
        self.tasks: list[Task] = []
        self.plans: dict[str, Any] = {}
        self.skipped: dict[str, str] = {}
        for task in tasks:
            try:
                self.plans[task.id] = plan_task(task, backend)
                self.tasks.append(task)
            except Unsupported as exc:
                self.skipped[task.id] = str(exc)
        if not self.tasks:
            raise ValueError(f"no task of suite {suite!r} (levels {levels}) is covered by the templates on {backend}; "
                             f"reasons: {dict(list(self.skipped.items())[:3])}")
        self._tasks_by_id = {t.id: t for t in self.tasks}
        self.action_space = spaces.MultiDiscrete([len(k.values) for k in self.knobs])
        self.observation_space = spaces.Box(low=-8.0, high=64.0, shape=(len(FEATURES),), dtype=np.float32)
        self._results: dict[tuple[str, tuple[int, ...]], EvalResult] = {}
        self.evaluations = 0
        self.task: Task | None = None
        self._space: Any = None
        self._steps: list[EvalResult] = []
        self._features: np.ndarray | None = None
        # Whether the last step's verdict came from the cache. Not in `info`: the same (seed, action)
        # must give the same info (gymnasium's determinism check), cached or not.
        self.last_step_cached = False

    # ------------------------------------------------------------------------------ evaluator
    @property
    def evaluator(self) -> Any:
        if self._evaluator is None:
            if self._closed:
                raise RuntimeError("this environment is closed")
            backend = getattr(self, "backend", None) or "auto"
            if self.judge_url:
                from ..eval.remote import RemoteEvaluator

                self._evaluator = RemoteEvaluator(self.judge_url, self.judge_token, config=self.config)
            else:
                from ..eval.evaluator import Evaluator

                self._evaluator = Evaluator(backend=backend, config=self.config, cache_dir=self.cache_dir)
            self._owns_evaluator = True
        return self._evaluator

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        options = options or {}
        if options.get("task_id"):
            task_id = str(options["task_id"])
            if task_id not in self._tasks_by_id:
                raise KeyError(f"task {task_id!r} is not in this environment "
                               f"({self.skipped.get(task_id, 'not in the suite/filter')})")
            self.task = self._tasks_by_id[task_id]
        else:
            self.task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        plan = self.plans[self.task.id]
        self._space = self._knob_space_for(plan)
        self._features = plan_features(plan, self.task.level)
        self._steps = []
        return self._features.copy(), {"task_id": self.task.id, "level": self.task.level, "backend": self.backend,
                                       "action_mask": self.action_masks()}

    def action_masks(self) -> np.ndarray:
        """One flat boolean per knob value (knobs in order); all True before the first reset."""
        if self._space is None:
            return np.ones(int(sum(self.action_space.nvec)), dtype=bool)
        return np.asarray(self._space.flat_mask(), dtype=bool)

    def canonical(self, action: Any) -> tuple[int, ...]:
        """The action judged: each value outside the current mask replaced by its knob's default."""
        return self._space.canonical([int(v) for v in np.asarray(action).reshape(-1)])

    def evaluate(self, action: Any) -> tuple[EvalResult, bool, tuple[int, ...]]:
        """(result, served from the cache, action judged) for the current task; no episode bookkeeping."""
        from ..schedule import render_candidate

        task = self.task
        judged = self.canonical(action)
        # Keyed by the rendered kernels, not the action: knobs that leave the kernels unchanged (e.g.
        # elementwise knobs while every epilogue is fused) share one verdict.
        source = render_candidate(self.plans[task.id], self._space.values(judged))
        key = (task.id, hashlib.sha256(source.split("\n", 2)[2].encode()).hexdigest())
        if key in self._results:
            return self._results[key], True, judged
        result = self.evaluator.evaluate(task, source, backend=self.backend, config=self.config)
        self._results[key] = result
        self.evaluations += 1
        return result, False, judged

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if len(self._steps) >= self.episode_steps:
            raise RuntimeError("the episode is over; call reset()")
        result, cached, judged = self.evaluate(action)
        reward = float(self.reward_fn(result, list(self._steps)))
        self._steps.append(result)
        speedup = result.speedup_vs_compile or result.speedup_vs_eager
        observation = self._features.copy()
        base = len(FEATURES) - 4
        observation[base] = float(np.clip(math.log(speedup), -8.0, 8.0)) if result.correct and speedup else 0.0
        observation[base + 1] = float(result.error_code in _COMPILE_FAILURES)
        observation[base + 2] = float(not result.correct)
        observation[base + 3] = float(len(self._steps))
        terminated = len(self._steps) >= self.episode_steps
        self.last_step_cached = cached
        info = {"task_id": self.task.id, "action": list(judged),
                "knobs": {k: (v if isinstance(v, (int, str)) else str(v)) for k, v in self._space.values(judged).items()},
                "result": result.to_dict(), "action_mask": self.action_masks()}
        if self.render_mode == "ansi":
            self._render = f"{self.task.id} {info['knobs']}: {result.summary()}"
        return observation, reward, terminated, False, info

    def render(self) -> str | None:
        return self._render if self.render_mode == "ansi" else None

    def close(self) -> None:
        if self._owns_evaluator and self._evaluator is not None:
            self._evaluator.close()
        self._evaluator = None
        self._closed = True
        super().close()
