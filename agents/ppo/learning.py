"""The PPO learning comparison on the `menu` toy (menu.py), with the real KernelEnv on the CPU backend
judging every candidate: PPO from the random policy against CUDA Agent's order (rejection fine-tuning
and value pretraining on warm-up batches, then PPO), each over several seeds. `run` writes the JSON and
a PNG of the mean curves; `benchmarks/ppo_learning.py` is its command line.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import platform
import tempfile
import time
from pathlib import Path

import torch

from . import menu
from .pipeline import run_stages
from .trainer import json_safe

CONDITIONS = {"ppo": ("ppo",), "rft+value+ppo": ("rft", "value", "ppo")}
CURVE_KEYS = ("mean_reward", "pass_rate", "entropy", "explained_variance", "clip_frac", "approx_kl", "value_loss")


def first_reaching(history: list[dict], threshold: float) -> int | None:
    """The first update whose mean reward is at least `threshold` (None if none)."""
    return next((line["update"] for line in history if line["mean_reward"] >= threshold), None)


def mean_curves(histories: list[list[dict]]) -> list[dict]:
    """Per update, the mean of each curve over runs (values that are None are left out)."""
    curves = []
    for lines in zip(*histories):
        row = {"update": lines[0]["update"]}
        for key in CURVE_KEYS:
            values = [line[key] for line in lines if line.get(key) is not None and math.isfinite(line[key])]
            row[key] = sum(values) / len(values) if values else None
        curves.append(row)
    return curves


TARGET_REWARD = 2.5  # the mean reward over the last 3 updates that counts as learned


def run(out_dir: str | Path, *, updates: int = 30, seeds: tuple[int, ...] = (0, 1, 2, 3, 4), episodes_per_task: int = 16,
        warmup_batches: int = 3, tasks: tuple[str, ...] | None = None, evaluator=None, backend: str = "cpu",
        progress: bool = True) -> dict:
    """Run both conditions for every seed; write the JSON and PNG into `out_dir`; return the JSON's content.
    `tasks`: menu task names (default all); `evaluator`: an Evaluator to judge the menu with (default: a
    new one with `menu.menu_eval_config()`). The threshold a run "reaches" is `TARGET_REWARD`, or the best
    mean reward - 0.25 where the judged menu allows less."""
    from cuda_gym.eval import Evaluator

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    owned = evaluator is None
    evaluator = evaluator or Evaluator(backend, menu.menu_eval_config())
    runs: dict[str, list[dict]] = {name: [] for name in CONDITIONS}
    try:
        board = menu.MenuEnv(evaluator, tasks, backend=backend)
        judged_rewards = board.judge_all()
        judge_seconds = time.perf_counter() - started
        best = board.best_mean_reward()
        threshold = min(TARGET_REWARD, best - 0.25)
        with tempfile.TemporaryDirectory() as scratch:
            for seed in seeds:
                for name, stages in CONDITIONS.items():
                    run_started = time.perf_counter()
                    policy = menu.tiny_policy(seed)
                    generator = torch.Generator().manual_seed(seed)

                    def collect(tag: str, policy=policy, generator=generator):
                        return menu.play_menu(policy, board, episodes_per_task, generator=generator)

                    summary = run_stages(policy, collect, stages, Path(scratch) / f"{name}_{seed}",
                                         ppo_config=menu.menu_ppo_config(seed=seed), updates=updates,
                                         warmup_batches=warmup_batches, rft_config=menu.MENU_RFT_CONFIG,
                                         value_config=menu.MENU_VALUE_CONFIG, pad_token_id=menu.PAD,
                                         progress=progress)
                    history = [json.loads(line) for line in
                               (Path(scratch) / f"{name}_{seed}" / "metrics.jsonl").read_text().splitlines()]
                    reached = first_reaching(history, threshold)
                    warmup_episodes = warmup_batches * episodes_per_task * len(board.names) if "rft" in stages else 0
                    runs[name].append({
                        "seed": seed,
                        "seconds": time.perf_counter() - run_started,
                        "updates_to_threshold": reached,
                        "episodes_to_threshold": None if reached is None else
                        warmup_episodes + reached * episodes_per_task * len(board.names),
                        "warmup_episodes": warmup_episodes,
                        "first_update_reward": history[0]["mean_reward"],
                        "last3_mean_reward": sum(h["mean_reward"] for h in history[-3:]) / len(history[-3:]),
                        "stages": {k: v for k, v in summary.items() if k in ("sampled", "rft", "value")},
                        "history": [{k: line.get(k) for k in ("update",) + CURVE_KEYS} for line in history],
                    })
    finally:
        if owned:
            evaluator.close()
    result = {
        "benchmark": "ppo_learning",
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "backend": backend,
        "host": {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version(),
                 "torch": torch.__version__, "cpu_threads": torch.get_num_threads()},
        "menu": {"tasks": list(judged_rewards), "rewards": judged_rewards, "best_mean_reward": best,
                 "uniform_policy_mean_reward": _uniform_policy_reward(judged_rewards),
                 "judge_seconds": judge_seconds},
        "settings": {"updates": updates, "seeds": list(seeds), "episodes_per_task": episodes_per_task,
                     "warmup_batches": warmup_batches, "ppo": menu.menu_ppo_config().to_dict(),
                     "policy_parameters": sum(p.numel() for p in menu.tiny_policy(0).parameters())},
        "threshold": threshold,
        "summary": {name: {
            "updates_to_threshold": [r["updates_to_threshold"] for r in rs],
            "seeds_reaching_threshold": sum(r["updates_to_threshold"] is not None for r in rs),
            "last3_at_least_threshold": sum(r["last3_mean_reward"] >= threshold for r in rs),
            "episodes_to_threshold": [r["episodes_to_threshold"] for r in rs],
            "first_update_reward_mean": sum(r["first_update_reward"] for r in rs) / len(rs),
            "last3_mean_reward_mean": sum(r["last3_mean_reward"] for r in rs) / len(rs),
        } for name, rs in runs.items()},
        "runs": runs,
        "seconds": time.perf_counter() - started,
    }
    stem = f"ppo_learning_{backend}_{dt.date.today().isoformat()}"
    (out_dir / f"{stem}.json").write_text(json.dumps(json_safe(result), indent=1))
    try:
        from .plot import plot_curves

        plot_curves({f"{name} (mean of {len(seeds)} seeds)": mean_curves([r["history"] for r in rs])
                     for name, rs in runs.items()}, out_dir / f"{stem}.png",
                    f"menu toy on the real CPU evaluator: tiny random policy, best mean reward {best:.2f}")
    except ImportError as exc:
        print(f"note: no PNG ({exc})")
    return result


def _uniform_policy_reward(judged: dict[str, dict[str, float]]) -> float:
    """Expected reward of the untrained policy if it drew tokens uniformly: a label with probability
    len(LABELS)/VOCAB_SIZE (then that label's candidate), else a format error (-1)."""
    p_label = len(menu.LABELS) / menu.VOCAB_SIZE
    per_task = [p_label * sum(rewards[kind] for kind in menu.label_kinds(name).values()) / len(menu.LABELS)
                + (1 - p_label) * -1.0 for name, rewards in judged.items()]
    return sum(per_task) / len(per_task)
