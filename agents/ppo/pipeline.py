"""CUDA Agent's training stages in order: sample trajectories, rejection fine-tuning (actor),
value pretraining (critic), then PPO. `run_stages` runs any subset of them for any policy and
collector; `cuda-gym train` and `benchmarks/ppo_learning.py` are thin callers.

Output directory:
- `metrics.jsonl`: one line per PPO update (see `PPOTrainer.update`);
- `trajectories.jsonl`: every episode PPO trained on; `warmup_trajectories.jsonl`: the episodes
  sampled for RFT and value pretraining (when those stages ran without given trajectories);
- `stages.json`: what each stage did (RFT kept/rejected counts and NLL per epoch, value
  pretraining loss and explained variance per epoch, PPO's first and last metrics);
- `checkpoints/`: `update_<n>/` and `final/` (`actor/`, `critic.pt`, `trainer_state.json`);
- `curves.png`: reward, entropy and explained variance per update (with matplotlib).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Sequence

from torch import nn

from ..rft import FinetuneConfig, RFTFilter, rejection_filter, rft_finetune, value_pretrain
from cuda_gym.trajectory import Trajectory, read_trajectories, write_trajectories
from .config import PPOConfig
from .trainer import PPOTrainer, json_safe, train

STAGES = ("rft", "value", "ppo")


def parse_stages(text: str) -> tuple[str, ...]:
    """"rft,value,ppo" -> ("rft", "value", "ppo"), checked and put in the paper's order."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in STAGES]
    if unknown or not names:
        raise ValueError(f"unknown stages {unknown or text!r}; choose a comma-separated subset of {', '.join(STAGES)}")
    return tuple(stage for stage in STAGES if stage in names)


def run_stages(policy: nn.Module, collect: Callable[[str], list[Trajectory]], stages: Sequence[str],
               out_dir: str | Path, *, ppo_config: PPOConfig | None = None, updates: int = 10,
               trajectories: Sequence[Trajectory] | str | Path | None = None, warmup_batches: int = 1,
               rft_filter: RFTFilter | None = None, rft_config: FinetuneConfig | None = None,
               value_config: FinetuneConfig | None = None, tokenizer=None, pad_token_id: int | None = None,
               plot_title: str = "", time_budget_s: float | None = None, progress: bool = True) -> dict:
    """Run `stages` (a subset of "rft", "value", "ppo", in that order) and return what `stages.json` holds.

    `collect(tag)` plays one batch with the current `policy` and returns its trajectories (tags:
    "warmup_<i>", "update_<n>"). RFT and value pretraining learn from `trajectories` (a list or a
    trajectories.jsonl path) or, without them, from `warmup_batches` batches collected with the
    initial policy. The critic (a copy of the actor, see `PPOTrainer`) is made after RFT, so it
    starts from the fine-tuned actor. `time_budget_s`: PPO starts no new update after this many
    seconds of PPO (see `train`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ppo_config = ppo_config or PPOConfig()
    summary: dict = {"stages": list(stages)}
    sampled: list[Trajectory] = []
    if "rft" in stages or "value" in stages:
        if isinstance(trajectories, (str, Path)):
            sampled = read_trajectories(trajectories)
        elif trajectories is not None:
            sampled = list(trajectories)
        else:
            sampled = [t for i in range(warmup_batches) for t in collect(f"warmup_{i}")]
            write_trajectories(out_dir / "warmup_trajectories.jsonl", sampled)
        summary["sampled"] = {"episodes": len(sampled),
                              "mean_reward": sum(t.total_reward for t in sampled) / max(len(sampled), 1)}
    if "rft" in stages:
        kept, rejected = rejection_filter(sampled, rft_filter)
        history = rft_finetune(policy, kept, rft_config, pad_token_id=pad_token_id or 0, progress=progress)
        summary["rft"] = {"kept": len(kept), "rejected": dict(rejected), "epochs": history}
    trainer = PPOTrainer(policy, ppo_config, tokenizer=tokenizer, pad_token_id=pad_token_id)
    if "value" in stages:
        summary["value"] = {"epochs": value_pretrain(trainer, sampled, value_config, progress=progress)}
    history: list[dict] = []
    if "ppo" in stages:
        history = train(trainer, collect, updates, out_dir, time_budget_s=time_budget_s, progress=progress)
        summary["ppo"] = {"updates": len(history), "first": history[0] if history else None,
                          "last": history[-1] if history else None}
    else:
        trainer.save(out_dir / "checkpoints" / "final")
    (out_dir / "stages.json").write_text(json.dumps(json_safe(summary), indent=1))
    if history:
        try:
            from .plot import plot_curves

            plot_curves({"+".join(stages): history}, out_dir / "curves.png", plot_title)
        except ImportError as exc:
            print(f"note: no curves.png ({exc})")
    return summary

