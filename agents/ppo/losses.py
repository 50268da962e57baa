"""The PPO math, one function per quantity, in the order a reader meets them in the paper.

advantages and returns (GAE) -> ratio -> clipped surrogate (clip-higher) -> clipped value loss ->
entropy -> KL to the reference -> diagnostics (approx. KL, clip fraction, explained variance).

Every tensor is `[batch, time]` over tokens. `action_mask` is 1 where the policy generated the
token (the tokens that are trained) and 0 elsewhere (prompt, environment feedback, padding); a
masked token gets no advantage, no loss and no gradient. Losses are returned per token; the caller
reduces them with `token_mean`, so a batch cut into micro-batches sums to the same token-level mean
as the whole batch (DAPO's token-level loss, which CUDA Agent's recipe uses).
"""
from __future__ import annotations

import torch


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, action_mask: torch.Tensor,
                gamma: float = 1.0, gae_lambda: float = 0.95,
                episode_ends: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the generated tokens of each row.

    Returns `(advantages, returns)`, both 0 where `action_mask` is 0; `returns = advantages + values`
    on generated tokens (the critic's regression targets).

    - Masked tokens (environment feedback between turns, prompts, padding) are skipped: the
      temporal difference at a generated token bootstraps from the value of the next *generated*
      token, as if the feedback tokens were not there. Rewards on masked tokens are ignored: put a
      turn's reward on its last generated token.
    - `episode_ends[b, t]` True means an episode ends after token t (nothing is bootstrapped across
      it; several episodes may share a row). Without it, each row is one episode that ends after its
      last token. The value after an episode's end is 0 (outcome rewards: the episode is over).

        delta_t = r_t + gamma * V(next) - V_t
        A_t     = delta_t + gamma * lambda * A(next)
    """
    action_mask = action_mask.bool()
    rewards, values = rewards.float(), values.float()
    batch, steps = rewards.shape
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros(batch, device=rewards.device)
    next_advantage = torch.zeros(batch, device=rewards.device)
    for t in reversed(range(steps)):
        if episode_ends is not None:
            ends = episode_ends[:, t].bool()
            next_value = torch.where(ends, torch.zeros_like(next_value), next_value)
            next_advantage = torch.where(ends, torch.zeros_like(next_advantage), next_advantage)
        is_action = action_mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * gae_lambda * next_advantage
        advantages[:, t] = torch.where(is_action, advantage, torch.zeros_like(advantage))
        next_value = torch.where(is_action, values[:, t], next_value)
        next_advantage = torch.where(is_action, advantage, next_advantage)
    returns = torch.where(action_mask, advantages + values, torch.zeros_like(values))
    return advantages, returns


def whiten(values: torch.Tensor, action_mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`values` shifted and scaled to mean 0, std 1 over the generated tokens (0 elsewhere)."""
    mask = action_mask.bool()
    selected = values[mask]
    if selected.numel() < 2:
        return torch.where(mask, values - selected.mean() if selected.numel() else values, torch.zeros_like(values))
    normalised = (values - selected.mean()) / (selected.std() + eps)
    return torch.where(mask, normalised, torch.zeros_like(values))


def policy_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """pi_theta(a_t | s_t) / pi_old(a_t | s_t), from log-probabilities."""
    return torch.exp(logprobs - old_logprobs)


def clipped_surrogate_loss(ratio: torch.Tensor, advantages: torch.Tensor,
                           clip_eps_low: float = 0.2, clip_eps_high: float = 0.28) -> torch.Tensor:
    """Per-token PPO policy loss with the asymmetric clip ("clip-higher"):

        L_t = max(-A_t * ratio_t, -A_t * clip(ratio_t, 1 - eps_low, 1 + eps_high))

    A larger eps_high lets low-probability tokens with positive advantage grow further per update,
    which keeps entropy from collapsing (DAPO; CUDA Agent uses 0.2 / 0.28)."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    return torch.maximum(unclipped, clipped)


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       value_clip_eps: float) -> torch.Tensor:
    """Per-token clipped value loss: the new value may move at most `value_clip_eps` from the value
    at rollout time before the loss stops rewarding the move.

        L_t = 0.5 * max((V_t - R_t)^2, (V_old_t + clip(V_t - V_old_t, -eps, eps) - R_t)^2)
    """
    values_clipped = old_values + torch.clamp(values - old_values, -value_clip_eps, value_clip_eps)
    return 0.5 * torch.maximum((values - returns) ** 2, (values_clipped - returns) ** 2)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-token entropy of the categorical distribution softmax(logits), in nats."""
    logits = logits.float()
    log_probs = torch.log_softmax(logits, dim=-1)
    return -(log_probs.exp() * log_probs).sum(-1)


def kl_to_reference(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref), the non-negative low-variance estimator (Schulman's k3):
    exp(ref - logp) - (ref - logp) - 1."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def approx_kl(ratio: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(pi_old || pi_theta): (ratio - 1) - log(ratio) (as CleanRL logs it)."""
    return (ratio - 1.0) - torch.log(ratio)


def clip_fraction(ratio: torch.Tensor, advantages: torch.Tensor,
                  clip_eps_low: float = 0.2, clip_eps_high: float = 0.28) -> torch.Tensor:
    """Per token, 1.0 where the clip decided the loss (the clipped term was the larger), else 0."""
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high)
    return (clipped > unclipped).float()


def token_mean(per_token: torch.Tensor, action_mask: torch.Tensor, num_tokens: int | float | None = None) -> torch.Tensor:
    """Sum of `per_token` over generated tokens divided by `num_tokens` (default: their count here).

    Pass the whole minibatch's token count when summing over micro-batches."""
    mask = action_mask.to(per_token.dtype)
    denominator = float(num_tokens) if num_tokens is not None else mask.sum().clamp(min=1.0)
    return (per_token * mask).sum() / denominator


def explained_variance(values: torch.Tensor, returns: torch.Tensor, action_mask: torch.Tensor) -> float:
    """1 - Var(returns - values) / Var(returns) over generated tokens: 1 is a perfect critic, 0 one no
    better than a constant, negative one worse than a constant. NaN when the returns do not vary."""
    mask = action_mask.bool()
    target, predicted = returns[mask].float(), values[mask].float()
    if target.numel() < 2:
        return float("nan")
    variance = target.var(unbiased=False)
    if variance.item() == 0.0:
        return float("nan")
    return float(1.0 - (target - predicted).var(unbiased=False) / variance)
