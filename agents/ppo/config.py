"""PPOConfig: every setting of the trainer; the defaults are CUDA Agent's (arXiv 2602.24286, §3.3, §4.1)
where the paper states them, and the note on each says where a default comes from otherwise."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

CRITIC_KINDS = ("separate", "head")
REWARD_PLACEMENTS = ("outcome", "per_turn")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")


@dataclass
class PPOConfig:
    # GAE (paper: gamma = 1, lambda = 0.95).
    gamma: float = 1.0
    gae_lambda: float = 0.95
    # Token-level clipped surrogate with clip-higher (paper: eps_low = 0.2, eps_high = 0.28).
    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    # Clipped value loss; the paper does not state its range: 0.5 is verl's default.
    value_clip_eps: float = 0.5
    # Weight of the value loss in the summed loss (matters only with critic="head", where the
    # backbone is shared; a separate critic has its own optimizer and the weight only scales its grads).
    vf_coef: float = 1.0
    # Entropy bonus (0: entropy is measured and logged, not rewarded).
    ent_coef: float = 0.0
    # KL to a frozen reference policy (0: no reference model is kept).
    kl_coef: float = 0.0
    # Learning rates (paper: actor 3e-6, critic 6e-6).
    actor_lr: float = 3e-6
    critic_lr: float = 6e-6
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    # Batch (paper: 1024). batch_size = episodes per update, the collector's target (`cuda-gym train`
    # plays ceil(batch_size / tasks) episodes of each task); each update makes `update_epochs` passes
    # over them in minibatches of `minibatch_size` turns (one optimizer step each), computed
    # `micro_batch_size` turns at a time (gradient accumulation).
    batch_size: int = 1024
    minibatch_size: int = 256
    micro_batch_size: int = 4
    update_epochs: int = 1
    # Whiten advantages over the whole batch's generated tokens (as verl does for GAE).
    normalize_advantages: bool = True
    # "outcome": the trajectory's total reward on its last generated token, 0 before (paper; with the
    # environment in reward_mode="final" that is the episode's best milestone). "per_turn": each
    # turn's reward on that turn's last generated token.
    reward_placement: str = "outcome"
    # "separate": a critic model of its own (paper, as in verl); "head": a value head on the policy's
    # last hidden state, sharing its backbone.
    critic: str = "separate"
    # The trainer divides logits by this before taking logprobs; it must match how the recorded
    # logprobs were computed. TransformersChat records the model's raw logprobs (before its sampling
    # temperature), so keep 1.0 with it, and sample at temperature 1 for on-policy updates; the
    # `logprob_gap` metric shows a mismatch.
    temperature: float = 1.0
    # Mixed precision: "auto" is bf16 autocast on CUDA and fp32 on the CPU.
    precision: str = "auto"
    # LoRA (peft) on the policy: rank 0 trains all weights.
    lora_rank: int = 0
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] | None = None  # None: peft's defaults for the architecture
    # Save a checkpoint every this many updates (0: only at the end).
    checkpoint_every: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.critic not in CRITIC_KINDS:
            raise ValueError(f"critic must be one of {CRITIC_KINDS}, got {self.critic!r}")
        if self.reward_placement not in REWARD_PLACEMENTS:
            raise ValueError(f"reward_placement must be one of {REWARD_PLACEMENTS}, got {self.reward_placement!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if not (0 <= self.clip_eps_low < 1 and self.clip_eps_high >= 0):
            raise ValueError("need 0 <= clip_eps_low < 1 and clip_eps_high >= 0")
        if self.micro_batch_size < 1 or self.minibatch_size < 1 or self.batch_size < 1 or self.update_epochs < 1:
            raise ValueError("batch_size, minibatch_size, micro_batch_size and update_epochs must be >= 1")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
