"""Many episodes at once: `rollout(chat, tasks, evaluator, out_dir)`.

Episodes run in threads (`concurrency` at a time), each with its own `KernelEnv` and all sharing
one `Evaluator` (so builds and baselines are shared and candidates are timed one at a time). Each
finished episode is appended to `<out_dir>/trajectories.jsonl` at once (one line, flushed) and
`<out_dir>/summary.json` is rewritten, so a crash loses only the episodes still being played.

`summary.json` follows CUDA Agent's protocol: take the best candidate of each trajectory
(`Trajectory.best()`), then over trajectories report the pass rate (best candidate correct), the
rates of trajectories whose best candidate is correct and faster than eager / than torch.compile
(speedup > 1), and the geometric mean speedups vs eager and vs compile over correct best
candidates that were timed against that baseline; per level and overall:

    {"pass_rate", "faster_than_eager_rate", "faster_than_compile_rate", "geomean_speedup_vs_eager",
     "geomean_speedup_vs_compile", "episodes", "end_reasons": {...}, "levels": {"1": {...}, ...},
     "tasks": {task_id: {"level", "episodes", "passed_episodes", "best_error_code",
                         "best_speedup_vs_eager", "best_speedup_vs_compile", "best_episode", "best_turn"}},
     "backend", "model", "env_backend", "config"}

A task's entry is its best over its episodes (the same ranking as within a trajectory). Rates and
geomeans are None where nothing qualifies (no trajectories, no timed correct candidate).
"""
from __future__ import annotations

import json
import os
import threading
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from cuda_gym.leaderboard.metrics import geomean

from .llm.base import ChatBackend
from .react import ReactConfig, ReactPolicy, ToolReactPolicy
from cuda_gym.trajectory import BestCandidate, Trajectory, append_trajectory, best_rank

ENVIRONMENTS = ("text", "workspace")
TRAJECTORIES_FILE = "trajectories.jsonl"
SUMMARY_FILE = "summary.json"


@dataclass
class RolloutConfig:
    """How episodes are played. max_turns: the environment's turn budget per episode (CUDA Agent
    plays up to 150 turns in training and 200 in evaluation; each turn costs an evaluation).
    concurrency: episodes in flight at once (the model generates for one while another is judged).
    seed: episode e resets its environment with `reset(seed=seed + e)` (Gymnasium seeding; KernelEnv
    uses its RNG only to draw a task, and rollout names the task, so it changes nothing there).
    env: "text" (KernelEnv, the ReAct policy answering with `#!` commands and code blocks) or
    "workspace" (WorkspaceEnv, CUDA Agent's workspace: `cuda_gym_agents.react.ToolReactPolicy` through
    function calling; choose its turns and reward mode here, e.g. max_turns=40, reward_mode="final",
    the registered workspace IDs' defaults). language: the kernel language the prompt asks for,
    "cuda" (the native forms) or "triton" (`@triton.jit` kernels)."""

    episodes_per_task: int = 1
    concurrency: int = 4
    max_turns: int = 8
    reward: str = "milestone"
    reward_mode: str = "per_step"
    seed: int = 0
    react: ReactConfig = field(default_factory=ReactConfig)
    env: str = "text"
    language: str = "cuda"


def rollout(chat: ChatBackend, tasks: Iterable[Any], evaluator: Any, out_dir: str | os.PathLike,
            config: RolloutConfig | None = None, *, backend: str = "auto", progress: bool = True) -> dict[str, Any]:
    """Play `config.episodes_per_task` episodes of every task; write both files; return the summary.

    `out_dir` is created; it must not hold a `trajectories.jsonl` already (nothing is overwritten:
    pick a new directory). `backend` is the environments' backend ("auto", "cuda", "cpu").
    """
    from tqdm import tqdm

    from cuda_gym.envs.kernel_env import KernelEnv
    from cuda_gym.envs.workspace_env import WorkspaceEnv

    config = config or RolloutConfig()
    if config.env not in ENVIRONMENTS:
        raise ValueError(f"RolloutConfig.env must be one of {ENVIRONMENTS}, got {config.env!r}")
    env_class = WorkspaceEnv if config.env == "workspace" else KernelEnv
    tasks = list(tasks)
    if not tasks:
        raise ValueError("no tasks to play")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    trajectories_path = out / TRAJECTORIES_FILE
    if trajectories_path.exists():
        raise FileExistsError(f"{trajectories_path} exists; choose a new output directory (nothing is overwritten)")
    trajectories_path.touch()
    policy = ToolReactPolicy(config.react) if config.env == "workspace" else ReactPolicy(config.react)
    jobs = [(task, episode) for task in tasks for episode in range(config.episodes_per_task)]
    finished: list[Trajectory] = []
    lock = threading.Lock()
    meta = {"backend": chat.name, "model": chat.model, "config": _config_dict(config)}

    def play(task: Any, episode: int) -> Trajectory:
        env = None
        try:
            env = env_class(backend=backend, evaluator=evaluator, max_turns=config.max_turns, reward=config.reward,
                            language=config.language,
                            reward_mode=config.reward_mode)
            return policy.play(env, chat, task, episode=episode, seed=config.seed + episode)
        except Exception as exc:  # the environment could not start the episode: still one record per episode
            return Trajectory(task_id=task.id, level=int(task.level), episode=episode, backend=chat.name,
                              model=chat.model, end_reason="env_error", error=f"{type(exc).__name__}: {exc}",
                              max_turns=config.max_turns, sampling=chat.sampling.to_dict())
        finally:
            if env is not None:
                env.close()

    bar = tqdm(total=len(jobs), desc="episodes", unit="ep", disable=not progress)
    with ThreadPoolExecutor(max_workers=max(1, config.concurrency), thread_name_prefix="cuda-gym-agent") as pool:
        futures = [pool.submit(play, task, episode) for task, episode in jobs]
        for future in as_completed(futures):
            trajectory = future.result()
            with lock:
                append_trajectory(trajectories_path, trajectory)
                finished.append(trajectory)
                summary = summarize(finished, **meta)
                _write_json(out / SUMMARY_FILE, summary)
            bar.update(1)
            bar.set_postfix(passed=f"{sum(_passed(t) for t in finished)}/{len(finished)}")
    bar.close()
    return summary


def _passed(trajectory: Trajectory) -> bool:
    best = trajectory.best()
    return best is not None and best.correct


def _config_dict(config: RolloutConfig) -> dict[str, Any]:
    return asdict(config)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(data, indent=1))
    os.replace(temporary, path)


def _rates(bests: list[BestCandidate | None]) -> dict[str, Any]:
    count = len(bests)
    correct = [b for b in bests if b is not None and b.correct]
    return {
        "episodes": count,
        "pass_rate": len(correct) / count if count else None,
        "faster_than_eager_rate": (sum(1 for b in correct if (b.speedup_vs_eager or 0) > 1) / count) if count else None,
        "faster_than_compile_rate": (sum(1 for b in correct if (b.speedup_vs_compile or 0) > 1) / count)
        if count else None,
        "geomean_speedup_vs_eager": geomean([b.speedup_vs_eager for b in correct]),
        "geomean_speedup_vs_compile": geomean([b.speedup_vs_compile for b in correct]),
    }


def summarize(trajectories: Iterable[Trajectory], **meta: Any) -> dict[str, Any]:
    """The summary of `trajectories` (see the module docstring); `meta` is copied into it."""
    trajectories = sorted(trajectories, key=lambda t: (t.task_id, t.episode))
    bests = [t.best() for t in trajectories]
    summary: dict[str, Any] = {"protocol": "best candidate of each trajectory (CUDA Agent); "
                                           "faster = correct and speedup > 1"}
    summary.update(_rates(bests))
    summary["end_reasons"] = dict(Counter(t.end_reason for t in trajectories))
    errors = [t.error for t in trajectories if t.end_reason in ("backend_error", "env_error") and t.error]
    summary["first_error"] = errors[0] if errors else ""
    by_level: dict[int, list[BestCandidate | None]] = defaultdict(list)
    for trajectory, best in zip(trajectories, bests):
        by_level[trajectory.level].append(best)
    summary["levels"] = {str(level): _rates(by_level[level]) for level in sorted(by_level)}
    tasks: dict[str, Any] = {}
    for trajectory, best in zip(trajectories, bests):
        entry = tasks.setdefault(trajectory.task_id, {"level": trajectory.level, "episodes": 0, "passed_episodes": 0,
                                                      "best_error_code": None, "best_speedup_vs_eager": None,
                                                      "best_speedup_vs_compile": None, "best_episode": None,
                                                      "best_turn": None, "_rank": None})
        entry["episodes"] += 1
        if best is None:
            continue
        entry["passed_episodes"] += int(best.correct)
        rank = best_rank(best)
        if entry["_rank"] is None or rank > entry["_rank"]:
            entry.update(_rank=rank, best_error_code=best.error_code, best_speedup_vs_eager=best.speedup_vs_eager,
                         best_speedup_vs_compile=best.speedup_vs_compile, best_episode=trajectory.episode,
                         best_turn=best.turn)
    for entry in tasks.values():
        entry.pop("_rank")
        if entry["best_error_code"] is None:
            entry["best_error_code"] = "NO_TURNS"
    summary["tasks"] = tasks
    env_backends = sorted({t.env_backend for t in trajectories if t.env_backend})
    summary["env_backend"] = ",".join(env_backends)
    summary.update(meta)
    return summary
