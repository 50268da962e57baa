"""PPO for LLM policies, as CUDA Agent trains them (arXiv 2602.24286): a learned critic, GAE with
gamma = 1 and lambda = 0.95, the clip-higher surrogate (eps 0.2 / 0.28), outcome rewards.

- `cuda_gym_agents.ppo.config`: `PPOConfig`, the paper's defaults;
- `cuda_gym_agents.ppo.losses`: the math, one function per quantity (GAE, ratio, clipped losses, entropy, KL);
- `cuda_gym_agents.ppo.batch`: trajectories -> per-turn token samples and padded micro-batches;
- `cuda_gym_agents.ppo.model`: forward passes, the critic, LoRA, mixed precision, checkpoints;
- `cuda_gym_agents.ppo.trainer`: `PPOTrainer.update(trajectories)` and the `train` loop;
- `cuda_gym_agents.ppo.menu`: the `menu` toy suite on which learning shows within minutes on a CPU;
- `cuda_gym_agents.ppo.cli`: the `cuda-gym train` command.

`from cuda_gym_agents.ppo import PPOConfig, PPOTrainer` works; importing the package itself imports nothing
heavy (the command line builds its parser from it).
"""
from __future__ import annotations

import importlib

_EXPORTS = {"PPOConfig": "config", "PPOTrainer": "trainer", "train": "trainer", "Critic": "model"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
