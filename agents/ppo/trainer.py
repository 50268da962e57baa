"""PPOTrainer: one PPO update from a batch of trajectories, and `train`, the loop around it.

An update reads like CleanRL's loop body:
1. score the batch under the policy and critic that played it (values; logprobs to check against
   those recorded at generation; reference logprobs when a KL term is on);
2. advantages and returns by GAE along each trajectory's generated tokens;
3. `update_epochs` passes of minibatch steps: ratio, clipped surrogate, clipped value loss,
   entropy, KL; gradients accumulated over micro-batches, then clipped, then one optimizer step.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch import nn
from tqdm import tqdm

from cuda_gym.trajectory import Trajectory, append_trajectory
from .batch import TurnSample, collate, trajectory_gae, turn_samples, unpad
from .config import PPOConfig
from .losses import (approx_kl, clip_fraction, clipped_surrogate_loss, clipped_value_loss, explained_variance,
                     kl_to_reference, policy_ratio, token_mean, whiten)
from .model import (Critic, ValueHead, apply_lora, autocast, hidden_size, policy_outputs, reference_context,
                    save_checkpoint)


def rollout_metrics(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """What the batch's episodes scored: mean reward, pass rate (the best candidate is correct),
    response length in tokens, and the share of replies cut at the generation length limit."""
    turns = [turn for trajectory in trajectories for turn in trajectory.turns]
    lengths = [len(turn.token_ids or ()) for turn in turns]
    return {
        "episodes": len(trajectories),
        "turns": len(turns),
        "mean_reward": sum(t.total_reward for t in trajectories) / max(len(trajectories), 1),
        "pass_rate": sum(1 for t in trajectories if (best := t.best()) and best.correct) / max(len(trajectories), 1),
        "mean_response_tokens": sum(lengths) / max(len(lengths), 1),
        "max_response_tokens": max(lengths, default=0),
        "truncation_share": sum(1 for t in turns if t.finish_reason == "length") / max(len(turns), 1),
    }


class PPOTrainer:
    """PPO for a causal-LM policy over recorded trajectories.

    - `policy`: a transformers causal LM (trained in place; with `config.lora_rank > 0` it is wrapped
      with LoRA adapters and `self.policy` is the peft model).
    - `critic`: a `Critic`; by default (`config.critic == "separate"`) a copy of the policy as it is now
      with a new value head, as CUDA Agent initialises its critic; ignored with `critic="head"`.
    - `reference`: the frozen policy of the KL term (only when `config.kl_coef > 0`; a LoRA policy
      uses its base weights when none is given).
    - `pad_token_id`: the id used to pad micro-batches (any id works: padding is masked);
      default: the tokenizer's pad or end-of-sequence id, else 0.
    """

    def __init__(self, policy: nn.Module, config: PPOConfig | None = None, *, critic: Critic | None = None,
                 reference: nn.Module | None = None, tokenizer=None, pad_token_id: int | None = None,
                 device: torch.device | str | None = None):
        self.config = config = config or PPOConfig()
        self.device = torch.device(device) if device is not None else next(policy.parameters()).device
        self.tokenizer = tokenizer
        if pad_token_id is None and tokenizer is not None:
            pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad_token_id or 0)
        if config.critic == "separate" and critic is None:
            critic = Critic(copy.deepcopy(policy))
        if config.lora_rank > 0:
            policy = apply_lora(policy, config.lora_rank, config.lora_alpha, config.lora_dropout,
                                config.lora_target_modules)
        self.policy = policy.to(self.device)
        # The critic is a separate model or a value head on the policy's hidden states.
        self.critic = critic.to(self.device) if config.critic == "separate" else None
        self.value_head = ValueHead(hidden_size(policy)).to(self.device) if config.critic == "head" else None
        self.reference = None
        if config.kl_coef > 0:
            self.reference = reference.to(self.device).eval() if reference is not None else None
            reference_context(self.policy, self.reference)  # fail now, not at the first update
            if self.reference is not None:
                self.reference.requires_grad_(False)
        actor_params = [p for p in self.policy.parameters() if p.requires_grad]
        critic_params = list((self.critic or self.value_head).parameters())
        self.actor_optimizer = torch.optim.AdamW(actor_params, lr=config.actor_lr, weight_decay=config.weight_decay)
        self.critic_optimizer = torch.optim.AdamW(critic_params, lr=config.critic_lr, weight_decay=config.weight_decay)
        self.updates = 0

    # ---------------------------------------------------------------------------- critic

    @property
    def critic_module(self) -> nn.Module:
        """The module holding the value function's own weights (the `Critic` or the value head)."""
        return self.critic if self.critic is not None else self.value_head

    def critic_values(self, batch, hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Values `[B, K]` of a micro-batch's generated tokens (`hidden`: the policy's hidden states, needed
        with a value head)."""
        if self.critic is not None:
            return self.critic(batch).float()
        return self.value_head(hidden).float()

    # ---------------------------------------------------------------------------- step 1

    @torch.no_grad()
    def score(self, samples: Sequence[TurnSample]) -> dict[str, list[torch.Tensor]]:
        """Per sample (1-D, one entry per generated token): `values` from the critic, `logprobs` the
        policy gives now (equal to the recorded ones before any update, up to numerics), and
        `ref_logprobs` when a KL term is on."""
        cfg = self.config
        self.policy.eval()
        self.critic_module.eval()
        scored: dict[str, list[torch.Tensor]] = {"values": [], "logprobs": [], "ref_logprobs": []}
        for start in range(0, len(samples), cfg.micro_batch_size):
            chunk = samples[start:start + cfg.micro_batch_size]
            batch = collate(chunk, self.pad_token_id, device=self.device)
            with autocast(self.device, cfg.precision):
                out = policy_outputs(self.policy, batch, cfg.temperature, with_hidden=self.critic is None)
                values = self.critic_values(batch, out.hidden)
                if cfg.kl_coef > 0:
                    model, context = reference_context(self.policy, self.reference)
                    with context:
                        scored["ref_logprobs"] += unpad(policy_outputs(model, batch, cfg.temperature).logprobs, chunk)
            scored["values"] += unpad(values, chunk)
            scored["logprobs"] += unpad(out.logprobs, chunk)
        return scored

    # ---------------------------------------------------------------------------- the update

    def update(self, trajectories: Sequence[Trajectory]) -> dict[str, float]:
        """One PPO update on `trajectories` (played by the current policy, with token ids and logprobs
        recorded); returns the update's metrics (see `docs/training.md`)."""
        cfg = self.config
        started = time.perf_counter()
        if not trajectories:
            raise ValueError("no trajectories to train on: the rollout returned none (see its trajectories.jsonl "
                             "for episodes that failed)")
        samples = turn_samples(trajectories, cfg.reward_placement)
        # 1. Values, and the logprobs the trainer computes for the recorded tokens, before any step.
        scored = self.score(samples)
        old_values = scored["values"]
        old_logprobs = [s.old_logprobs for s in samples]
        logprob_gap = torch.cat([(a - b).abs() for a, b in zip(scored["logprobs"], old_logprobs)]).mean().item()

        # 2. Advantages and returns, by GAE along each trajectory's generated tokens.
        advantages, returns = trajectory_gae(samples, old_values, cfg.gamma, cfg.gae_lambda)
        all_values, all_returns = torch.cat(old_values), torch.cat(returns)
        every = torch.ones_like(all_values, dtype=torch.bool)
        value_ev = explained_variance(all_values, all_returns, every)
        if cfg.normalize_advantages:
            flat = whiten(torch.cat(advantages), every)
            advantages = list(torch.split(flat, [len(s.response_ids) for s in samples]))

        per_token = {"old_logprobs": old_logprobs, "advantages": advantages, "returns": returns,
                     "old_values": old_values}
        if cfg.kl_coef > 0:
            per_token["ref_logprobs"] = scored["ref_logprobs"]

        # 3. Minibatch steps.
        self.policy.train()
        self.critic_module.train()
        sums: dict[str, float] = {}
        total_tokens = 0
        grad_norms = []
        order = list(range(len(samples)))
        rng = random.Random(cfg.seed * 100_003 + self.updates)
        for _ in range(cfg.update_epochs):
            rng.shuffle(order)
            for mb_start in range(0, len(order), cfg.minibatch_size):
                minibatch = order[mb_start:mb_start + cfg.minibatch_size]
                minibatch_tokens = sum(len(samples[i].response_ids) for i in minibatch)
                self.actor_optimizer.zero_grad(set_to_none=True)
                self.critic_optimizer.zero_grad(set_to_none=True)
                for mc_start in range(0, len(minibatch), cfg.micro_batch_size):
                    micro = minibatch[mc_start:mc_start + cfg.micro_batch_size]
                    batch = collate([samples[i] for i in micro], self.pad_token_id,
                                    {name: [values[i] for i in micro] for name, values in per_token.items()},
                                    device=self.device)
                    stats = self._loss_and_backward(batch, minibatch_tokens)
                    for name, value in stats.items():
                        sums[name] = sums.get(name, 0.0) + value
                total_tokens += minibatch_tokens
                grad_norms.append(self._step())
        self.updates += 1
        self.policy.eval()  # ready to generate the next batch

        # Each stat summed token-weighted; divide by all tokens seen over the epochs.
        metrics: dict[str, float] = {"update": self.updates}
        metrics.update(rollout_metrics(trajectories))
        metrics.update({name: value / max(total_tokens, 1) for name, value in sums.items()})
        metrics.update({
            "explained_variance": value_ev,
            "logprob_gap": logprob_gap,
            "mean_value": all_values.mean().item(),
            "mean_return": all_returns.mean().item(),
            "grad_norm": sum(grad_norms) / max(len(grad_norms), 1),
            "tokens": sum(len(s.response_ids) for s in samples),
            "update_seconds": time.perf_counter() - started,
        })
        return metrics

    def _loss_and_backward(self, batch, minibatch_tokens: int) -> dict[str, float]:
        """Loss of one micro-batch, scaled so the micro-batches of a minibatch sum to its token mean;
        backward; returns each stat times this micro-batch's share of tokens (summed by the caller)."""
        cfg = self.config
        mask = batch.action_mask
        t = batch.per_token
        with autocast(self.device, cfg.precision):
            out = policy_outputs(self.policy, batch, cfg.temperature, with_hidden=self.critic is None)
            values = self.critic_values(batch, out.hidden)
        ratio = policy_ratio(out.logprobs, t["old_logprobs"])
        pg_loss = token_mean(clipped_surrogate_loss(ratio, t["advantages"], cfg.clip_eps_low, cfg.clip_eps_high),
                             mask, minibatch_tokens)
        value_loss = token_mean(clipped_value_loss(values, t["old_values"], t["returns"], cfg.value_clip_eps),
                                mask, minibatch_tokens)
        entropy = token_mean(out.entropy, mask, minibatch_tokens)
        loss = pg_loss + cfg.vf_coef * value_loss - cfg.ent_coef * entropy
        stats = {}
        if cfg.kl_coef > 0:
            kl = token_mean(kl_to_reference(out.logprobs, t["ref_logprobs"]), mask, minibatch_tokens)
            loss = loss + cfg.kl_coef * kl
            stats["kl_to_reference"] = kl.item()
        loss.backward()
        with torch.no_grad():
            stats.update({
                "pg_loss": pg_loss.item(),
                "value_loss": value_loss.item(),
                "entropy": entropy.item(),
                "approx_kl": token_mean(approx_kl(ratio), mask, minibatch_tokens).item(),
                "clip_frac": token_mean(clip_fraction(ratio, t["advantages"], cfg.clip_eps_low, cfg.clip_eps_high),
                                        mask, minibatch_tokens).item(),
            })
        return {name: value * minibatch_tokens for name, value in stats.items()}

    def _step(self) -> float:
        cfg = self.config
        params = [p for group in self.actor_optimizer.param_groups for p in group["params"]]
        params += [p for group in self.critic_optimizer.param_groups for p in group["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
        self.actor_optimizer.step()
        self.critic_optimizer.step()
        return float(norm)

    # ---------------------------------------------------------------------------- checkpoints

    def save(self, directory: str | Path) -> Path:
        """A checkpoint: `actor/` (save_pretrained), `critic.pt`, `trainer_state.json` (update count,
        config). Reload the actor with `from_pretrained(directory/'actor')` (peft's for LoRA)."""
        return save_checkpoint(directory, self.policy, self.critic_module, self.tokenizer,
                               {"updates": self.updates, "critic": self.config.critic, "config": self.config.to_dict()})

    def load_critic(self, path: str | Path) -> None:
        """Load a critic state dict saved by `save` (or by value pretraining) into this trainer's critic."""
        self.critic_module.load_state_dict(torch.load(path, map_location=self.device))


def train(trainer: PPOTrainer, collect: Callable[[str], list[Trajectory]], num_updates: int,
          out_dir: str | Path, *, time_budget_s: float | None = None, progress: bool = True) -> list[dict[str, float]]:
    """`num_updates` rounds of: `collect("update_<n>")` -> trajectories played by the current policy
    (appended to `out_dir/trajectories.jsonl` before training on them), `trainer.update`, one line in
    `out_dir/metrics.jsonl`. Checkpoints go to `out_dir/checkpoints/update_<n>/` every
    `config.checkpoint_every` updates and at the end (`out_dir/checkpoints/final/`).
    `time_budget_s`: start no new round once this many seconds have passed since the first began
    (the round under way finishes; at least one round runs)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    history = []
    started = time.perf_counter()
    bar = tqdm(range(num_updates), desc="ppo", unit="update", disable=not progress)
    for _ in bar:
        if history and time_budget_s is not None and time.perf_counter() - started >= time_budget_s:
            print(f"note: PPO stopped after {len(history)} of {num_updates} updates (time budget {time_budget_s:.0f} s)")
            break
        trajectories = collect(f"update_{trainer.updates + 1}")
        for trajectory in trajectories:
            append_trajectory(out_dir / "trajectories.jsonl", trajectory)
        metrics = trainer.update(trajectories)
        history.append(metrics)
        with open(out_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(json_safe(metrics)) + "\n")
        bar.set_postfix(reward=f"{metrics['mean_reward']:.2f}", ev=f"{metrics['explained_variance']:.2f}")
        every = trainer.config.checkpoint_every
        if every and trainer.updates % every == 0:
            trainer.save(out_dir / "checkpoints" / f"update_{trainer.updates}")
    trainer.save(out_dir / "checkpoints" / "final")
    return history


def json_safe(value):
    """`value` with every non-finite float replaced by None: JSON has no NaN, and an undefined
    quantity (e.g. the explained variance of constant returns) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
