"""Rejection fine-tuning (RFT) and value pretraining: CUDA Agent's two stages between sampling agent
trajectories and multi-turn PPO (arXiv 2602.24286, §3.3).

- `rejection_filter` keeps the trajectories worth imitating: reward R > 0, no loop, no format error
  (`RFTFilter` says exactly what counts as each).
- `rft_finetune` trains the policy on the kept trajectories' generated tokens (negative
  log-likelihood, token mean; prompts and environment feedback are not trained), which initialises
  the actor.
- `value_pretrain` fits the critic of a `PPOTrainer` to GAE targets on the same trajectories with
  the policy frozen, which initialises the critic (without it, the paper's explained variance stays
  between -8 and -0.5).

Both read `Trajectory` records (`cuda_gym.trajectory.read_trajectories("trajectories.jsonl")`) and
train on the recorded token ids, never re-tokenising text.
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn
from tqdm import tqdm

from .ppo.batch import collate, trajectory_gae, turn_samples
from .ppo.losses import explained_variance, token_mean
from .ppo.model import autocast, policy_outputs
from cuda_gym.trajectory import Trajectory

FORMAT_ERROR_CODES = ("INVALID_ACTION",)


@dataclass
class RFTFilter:
    """What `rejection_filter` keeps. Defaults: CUDA Agent's rule (R > 0, no loops, no format errors).

    - reward: `total_reward > min_reward`.
    - format error: a turn the environment refused as malformed (`INVALID_ACTION`), a reply cut at
      the generation limit (`finish_reason == "length"`, when `drop_truncated`), or an episode that
      ended on a backend or environment error.
    - loop: the same reply text more than `max_reply_repeats` times in the trajectory, or one reply
      in which a span of `loop_ngram` words occurs at least `loop_ngram_repeats` times (generation
      stuck repeating itself).
    """

    min_reward: float = 0.0
    max_reply_repeats: int = 1
    loop_ngram: int = 25
    loop_ngram_repeats: int = 5
    drop_truncated: bool = True


def _has_repeated_span(text: str, n: int, repeats: int) -> bool:
    words = text.split()
    if len(words) < n * repeats:
        return False
    counts = Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))
    return max(counts.values()) >= repeats


def rejection_reason(trajectory: Trajectory, rule: RFTFilter | None = None) -> str | None:
    """Why `trajectory` is rejected ("reward", "format", "loop"), or None when it is kept."""
    rule = rule or RFTFilter()
    if not trajectory.turns or trajectory.total_reward <= rule.min_reward:
        return "reward"
    if trajectory.end_reason in ("backend_error", "env_error"):
        return "format"
    for turn in trajectory.turns:
        if turn.error_code in FORMAT_ERROR_CODES or (rule.drop_truncated and turn.finish_reason == "length"):
            return "format"
    replies = Counter(turn.reply for turn in trajectory.turns)
    if max(replies.values()) > rule.max_reply_repeats:
        return "loop"
    if any(_has_repeated_span(turn.reply, rule.loop_ngram, rule.loop_ngram_repeats) for turn in trajectory.turns):
        return "loop"
    return None


def rejection_filter(trajectories: Sequence[Trajectory], rule: RFTFilter | None = None
                     ) -> tuple[list[Trajectory], Counter]:
    """The kept trajectories, and how many were rejected for each reason."""
    kept, rejected = [], Counter()
    for trajectory in trajectories:
        reason = rejection_reason(trajectory, rule)
        if reason is None:
            kept.append(trajectory)
        else:
            rejected[reason] += 1
    return kept, rejected


@dataclass
class FinetuneConfig:
    """Supervised passes over trajectories (RFT and value pretraining). The paper gives no values
    for these stages; the defaults are ours: a few epochs at a small learning rate."""

    epochs: int = 2
    lr: float = 1e-5
    minibatch_size: int = 32        # turns per optimizer step
    micro_batch_size: int = 4       # turns per forward pass (gradient accumulation)
    max_grad_norm: float = 1.0
    precision: str = "auto"
    seed: int = 0


def _minibatches(count: int, config: FinetuneConfig, epoch: int):
    order = list(range(count))
    random.Random(config.seed * 7919 + epoch).shuffle(order)
    for start in range(0, count, config.minibatch_size):
        minibatch = order[start:start + config.minibatch_size]
        yield minibatch, [minibatch[i:i + config.micro_batch_size]
                          for i in range(0, len(minibatch), config.micro_batch_size)]


def rft_finetune(policy: nn.Module, trajectories: Sequence[Trajectory], config: FinetuneConfig | None = None, *,
                 pad_token_id: int = 0, progress: bool = True) -> list[dict[str, float]]:
    """Fine-tune `policy` in place on the generated tokens of `trajectories` (already filtered:
    see `rejection_filter`). Returns one metrics dict per epoch: `epoch`, `nll` (mean negative
    log-likelihood per token during the epoch), `turns`, `tokens`."""
    config = config or FinetuneConfig()
    if not trajectories:
        raise ValueError("no trajectories to fine-tune on: rejection_filter kept none (sample more episodes, "
                         "or check the rewards in trajectories.jsonl)")
    device = next(policy.parameters()).device
    samples = turn_samples(trajectories)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr)
    history = []
    policy.train()
    for epoch in tqdm(range(config.epochs), desc="rft", unit="epoch", disable=not progress):
        nll_sum, tokens = 0.0, 0
        for minibatch, micros in _minibatches(len(samples), config, epoch):
            minibatch_tokens = sum(len(samples[i].response_ids) for i in minibatch)
            optimizer.zero_grad(set_to_none=True)
            for micro in micros:
                batch = collate([samples[i] for i in micro], pad_token_id, device=device)
                with autocast(device, config.precision):
                    out = policy_outputs(policy, batch)
                loss = token_mean(-out.logprobs, batch.action_mask, minibatch_tokens)
                loss.backward()
                nll_sum += loss.item() * minibatch_tokens
            torch.nn.utils.clip_grad_norm_(policy.parameters(), config.max_grad_norm)
            optimizer.step()
            tokens += minibatch_tokens
        history.append({"epoch": epoch + 1, "nll": nll_sum / max(tokens, 1), "turns": len(samples), "tokens": tokens})
    policy.eval()
    return history


def value_pretrain(trainer, trajectories: Sequence[Trajectory], config: FinetuneConfig | None = None, *,
                   progress: bool = True) -> list[dict[str, float]]:
    """Fit `trainer`'s critic (a `PPOTrainer`'s separate critic or value head) to GAE targets on
    `trajectories`, the policy frozen. Each epoch first scores every turn with the current critic,
    computes the targets (GAE returns with the trainer's gamma and lambda, the trainer's reward
    placement), then takes minibatch steps on the squared error at `config.lr` (default: the
    trainer's critic learning rate). Returns `config.epochs + 1` entries, the first before any step:
    `epoch` (epochs done), `value_loss` (mean squared error to the targets of that moment) and
    `explained_variance` of the critic's values for those targets."""
    ppo = trainer.config
    config = config or FinetuneConfig(lr=ppo.critic_lr)
    samples = turn_samples(trajectories, ppo.reward_placement)
    critic = trainer.critic_module
    optimizer = torch.optim.AdamW(critic.parameters(), lr=config.lr)
    history = []

    def measure(epochs_done: int) -> list[torch.Tensor]:
        values = trainer.score(samples)["values"]
        _, returns = trajectory_gae(samples, values, ppo.gamma, ppo.gae_lambda)
        flat_values, flat_returns = torch.cat(values), torch.cat(returns)
        every = torch.ones_like(flat_values, dtype=torch.bool)
        history.append({"epoch": epochs_done, "value_loss": float(((flat_values - flat_returns) ** 2).mean()),
                        "explained_variance": explained_variance(flat_values, flat_returns, every)})
        return returns

    returns = measure(0)
    for epoch in tqdm(range(config.epochs), desc="value pretraining", unit="epoch", disable=not progress):
        critic.train()
        for minibatch, micros in _minibatches(len(samples), config, epoch):
            minibatch_tokens = sum(len(samples[i].response_ids) for i in minibatch)
            optimizer.zero_grad(set_to_none=True)
            for micro in micros:
                batch = collate([samples[i] for i in micro], trainer.pad_token_id, {"returns": [returns[i] for i in micro]},
                                device=trainer.device)
                with autocast(trainer.device, config.precision):
                    hidden = None
                    if trainer.critic is None:  # value head: the policy's hidden states, the policy frozen
                        with torch.no_grad():
                            hidden = policy_outputs(trainer.policy, batch, with_hidden=True).hidden
                    predicted = trainer.critic_values(batch, hidden)
                loss = token_mean((predicted - batch.per_token["returns"]) ** 2, batch.action_mask, minibatch_tokens)
                loss.backward()
            torch.nn.utils.clip_grad_norm_(critic.parameters(), config.max_grad_norm)
            optimizer.step()
        returns = measure(epoch + 1)  # new targets from the refitted critic
    critic.eval()
    return history
