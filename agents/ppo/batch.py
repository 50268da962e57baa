"""From trajectories to token tensors: one training sample per turn, rewards on generated tokens,
GAE along each trajectory's generated tokens, and padded micro-batches.

A turn's sample is `prompt_token_ids + token_ids` exactly as recorded at generation (never
re-tokenised); only `token_ids` are trained. The environment's feedback reaches the model inside the
next turn's prompt, so it is never a generated token and never trained. GAE runs along one
trajectory's generated tokens, turn after turn, skipping everything in between.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from cuda_gym.trajectory import Trajectory
from .losses import compute_gae


class TrajectoryError(ValueError):
    """A trajectory cannot be trained on; the message says which one and why."""


@dataclass
class TurnSample:
    """One turn as a training sample. Per-token tensors have one entry per generated token."""

    trajectory: int                 # index of its trajectory in the batch
    turn: int                       # the turn's `index`
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: torch.Tensor      # recorded at generation
    rewards: torch.Tensor           # the reward placed on each generated token (mostly 0)
    truncated: bool                 # generation hit its length limit

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def turn_samples(trajectories: Sequence[Trajectory], reward_placement: str = "outcome") -> list[TurnSample]:
    """The training samples of `trajectories`, in order.

    `reward_placement="outcome"`: the trajectory's `total_reward` on its last generated token, 0 on
    every other. `"per_turn"`: each turn's `reward` on that turn's last generated token. Turns that
    generated nothing are skipped (with per-turn rewards, theirs is carried to the next turn that
    generated tokens, or to the last one when none follows).
    Raises `TrajectoryError` for a turn without token ids, prompt ids or logprobs (roll out with a
    backend that records them, e.g. `TransformersChat`) or with mismatched lengths, and for a
    trajectory with no generated token at all.
    """
    samples: list[TurnSample] = []
    for number, trajectory in enumerate(trajectories):
        where = f"trajectory {number} ({trajectory.task_id}, episode {trajectory.episode})"
        own: list[TurnSample] = []
        pending_reward = 0.0
        for turn in trajectory.turns:
            if turn.token_ids is None or turn.prompt_token_ids is None or turn.logprobs is None:
                raise TrajectoryError(f"{where}, turn {turn.index}: no token ids or logprobs were recorded; PPO "
                                      "trains on what the model generated: roll out with a backend that records "
                                      "them (TransformersChat)")
            if len(turn.logprobs) != len(turn.token_ids):
                raise TrajectoryError(f"{where}, turn {turn.index}: {len(turn.token_ids)} token ids but "
                                      f"{len(turn.logprobs)} logprobs; the record is damaged")
            pending_reward += float(turn.reward)
            if not turn.token_ids:
                continue
            rewards = torch.zeros(len(turn.token_ids))
            if reward_placement == "per_turn":
                rewards[-1] = pending_reward
                pending_reward = 0.0
            own.append(TurnSample(trajectory=number, turn=turn.index, prompt_ids=list(turn.prompt_token_ids),
                                  response_ids=list(turn.token_ids),
                                  old_logprobs=torch.tensor(turn.logprobs, dtype=torch.float32),
                                  rewards=rewards, truncated=turn.finish_reason == "length"))
        if not own:
            raise TrajectoryError(f"{where}: no turn generated a token ({trajectory.end_reason}: "
                                  f"{trajectory.error or 'no error recorded'}); leave it out of the batch")
        if reward_placement == "outcome":
            own[-1].rewards[-1] = float(trajectory.total_reward)
        else:
            own[-1].rewards[-1] += pending_reward
        samples.extend(own)
    return samples


def trajectory_gae(samples: Sequence[TurnSample], values: Sequence[torch.Tensor], gamma: float,
                   gae_lambda: float) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Advantages and returns per sample (1-D, one entry per generated token), with GAE run along
    each trajectory's generated tokens across its turns; the episode ends after its last token."""
    by_trajectory: dict[int, list[int]] = {}
    for index, sample in enumerate(samples):
        by_trajectory.setdefault(sample.trajectory, []).append(index)
    order = list(by_trajectory.values())
    lengths = [sum(len(samples[i].response_ids) for i in members) for members in order]
    steps = max(lengths)
    rewards = torch.zeros(len(order), steps)
    value_rows = torch.zeros(len(order), steps)
    mask = torch.zeros(len(order), steps, dtype=torch.bool)
    for row, members in enumerate(order):
        rewards[row, :lengths[row]] = torch.cat([samples[i].rewards for i in members])
        value_rows[row, :lengths[row]] = torch.cat([values[i].float().cpu() for i in members])
        mask[row, :lengths[row]] = True
    advantages, returns = compute_gae(rewards, value_rows, mask, gamma, gae_lambda)
    sample_advantages: list[torch.Tensor] = [torch.empty(0)] * len(samples)
    sample_returns: list[torch.Tensor] = [torch.empty(0)] * len(samples)
    for row, members in enumerate(order):
        start = 0
        for i in members:
            stop = start + len(samples[i].response_ids)
            sample_advantages[i] = advantages[row, start:stop]
            sample_returns[i] = returns[row, start:stop]
            start = stop
    return sample_advantages, sample_returns


@dataclass
class MicroBatch:
    """Left-padded token ids of some samples, with per-token tensors right-aligned to their ends.

    `input_ids`, `attention_mask`: `[B, L]`. Every per-token tensor is `[B, K]`, K the longest
    response: column j of row b is the token at `input_ids[b, L - K + j]`, and `action_mask` is 1 on
    the row's own generated tokens (the last `len(response_ids)` columns)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    action_mask: torch.Tensor
    per_token: dict[str, torch.Tensor]

    @property
    def response_width(self) -> int:
        return self.action_mask.shape[1]


def collate(samples: Sequence[TurnSample], pad_token_id: int, per_token: dict[str, Sequence[torch.Tensor]] | None = None,
            device: torch.device | str = "cpu") -> MicroBatch:
    """A `MicroBatch` of `samples`; `per_token[name][i]` is sample i's 1-D tensor (one entry per
    generated token), placed right-aligned in `[B, K]`."""
    length = max(s.length for s in samples)
    width = max(len(s.response_ids) for s in samples)
    input_ids = torch.full((len(samples), length), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(samples), length), dtype=torch.long)
    action_mask = torch.zeros((len(samples), width), dtype=torch.bool)
    tensors = {name: torch.zeros((len(samples), width)) for name in (per_token or {})}
    for row, sample in enumerate(samples):
        ids = sample.prompt_ids + sample.response_ids
        input_ids[row, length - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention_mask[row, length - len(ids):] = 1
        n = len(sample.response_ids)
        action_mask[row, width - n:] = True
        for name, values in (per_token or {}).items():
            tensors[name][row, width - n:] = values[row].float()
    return MicroBatch(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                      action_mask=action_mask.to(device), per_token={k: v.to(device) for k, v in tensors.items()})


def unpad(per_token: torch.Tensor, samples: Sequence[TurnSample]) -> list[torch.Tensor]:
    """The inverse of `collate` for one `[B, K]` tensor: each sample's 1-D tensor of its tokens."""
    width = per_token.shape[1]
    return [per_token[row, width - len(s.response_ids):].detach().float().cpu() for row, s in enumerate(samples)]
