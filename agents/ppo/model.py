"""The model side: forward passes that give per-token logprobs, entropy and values, the critic,
LoRA, mixed precision, and checkpoints.

A policy is a transformers causal LM (`model(input_ids, attention_mask, position_ids,
logits_to_keep, output_hidden_states)` returning `.logits` and `.hidden_states`). Only the logits
of generated tokens are computed (`logits_to_keep`), so long multi-turn prompts cost no vocabulary-
sized activations.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .batch import MicroBatch
from .losses import entropy_from_logits


def hidden_size(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    for name in ("hidden_size", "n_embd", "d_model"):
        if config is not None and getattr(config, name, None):
            return int(getattr(config, name))
    raise ValueError(f"cannot tell the hidden size of {type(model).__name__}: it has no config.hidden_size")


class ValueHead(nn.Module):
    """hidden state -> scalar value. Starts at 0 everywhere (zero weights), so an untrained critic
    predicts 0 rather than noise."""

    def __init__(self, size: int):
        super().__init__()
        self.linear = nn.Linear(size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype)).squeeze(-1)


class Critic(nn.Module):
    """A separate critic: a causal LM backbone (its last hidden state; usually a copy of the policy's
    checkpoint) and a `ValueHead`."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.value_head = ValueHead(hidden_size(backbone))

    def forward(self, batch: MicroBatch) -> torch.Tensor:
        """Values `[B, K]` aligned with the batch's generated tokens: V(s_t), the state before token t."""
        hidden = _hidden_before_tokens(self.backbone, batch, keep_logits=1)
        return self.value_head(hidden)


@dataclass
class PolicyOutputs:
    logprobs: torch.Tensor          # [B, K] log pi(token_t | before t)
    entropy: torch.Tensor           # [B, K]
    hidden: torch.Tensor | None     # [B, K, H] the hidden state each token was predicted from


def _position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    # Left padding: positions count real tokens only, so a sample reads the same with or without pads.
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def _hidden_before_tokens(model: nn.Module, batch: MicroBatch, keep_logits: int) -> torch.Tensor:
    width = batch.response_width
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=_position_ids(batch.attention_mask), logits_to_keep=keep_logits,
                output_hidden_states=True, use_cache=False)
    return out.hidden_states[-1][:, -(width + 1):-1]


def policy_outputs(model: nn.Module, batch: MicroBatch, temperature: float = 1.0,
                   with_hidden: bool = False) -> PolicyOutputs:
    """Per-token logprobs and entropy of the generated tokens under `model` (logits / temperature),
    and optionally the hidden states they were predicted from (for a value head)."""
    width = batch.response_width
    out = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                position_ids=_position_ids(batch.attention_mask), logits_to_keep=width + 1,
                output_hidden_states=with_hidden, use_cache=False)
    logits = out.logits[:, :-1].float() / temperature
    targets = batch.input_ids[:, -width:]
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    hidden = out.hidden_states[-1][:, -(width + 1):-1] if with_hidden else None
    return PolicyOutputs(logprobs=logprobs, entropy=entropy_from_logits(logits), hidden=hidden)


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """Mixed precision for the forward passes: "auto" is bf16 on CUDA and nothing on the CPU."""
    if precision == "auto":
        precision = "bf16" if device.type == "cuda" else "fp32"
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def apply_lora(model: nn.Module, rank: int, alpha: int, dropout: float, target_modules: list[str] | None) -> nn.Module:
    """`model` with LoRA adapters (peft); only the adapters train. Needs `pip install 'cuda_gym[rl-llm]'`."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError("LoRA needs peft: pip install 'cuda_gym[rl-llm]' (or set lora_rank=0 to train all "
                          "weights)") from None
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                        task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def reference_context(policy: nn.Module, reference: nn.Module | None) -> tuple[nn.Module, contextlib.AbstractContextManager]:
    """The model that gives reference logprobs, and the context to run it in: a frozen copy when one
    was given, else a LoRA policy with its adapters switched off (the base weights are the reference)."""
    if reference is not None:
        return reference, contextlib.nullcontext()
    if hasattr(policy, "disable_adapter"):
        return policy, policy.disable_adapter()
    raise ValueError("kl_coef > 0 needs a reference policy: pass reference=... (a frozen copy of the initial "
                     "policy) or train with LoRA (the base weights are the reference)")


def save_checkpoint(directory: str | Path, policy: nn.Module, critic: nn.Module | None, tokenizer=None,
                    state: dict | None = None) -> Path:
    """Write `directory/actor/` (`save_pretrained`: full weights, or the adapters of a LoRA policy),
    `directory/critic.pt` (the critic's or value head's state dict) and `directory/trainer_state.json`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(directory / "actor")
    if tokenizer is not None:
        tokenizer.save_pretrained(directory / "actor")
    if critic is not None:
        torch.save(critic.state_dict(), directory / "critic.pt")
    (directory / "trainer_state.json").write_text(json.dumps(state or {}, indent=1))
    return directory
