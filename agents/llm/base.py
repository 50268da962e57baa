"""The one chat interface every backend implements: messages in, a `ChatReply` out."""
from __future__ import annotations

import abc
from dataclasses import asdict, dataclass, field
from typing import Any

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


class BackendError(RuntimeError):
    """The backend could not produce a reply (after its retries); the message says what to check."""


@dataclass
class SamplingConfig:
    """How replies are sampled. The defaults are on-policy sampling for RL: the model's own
    distribution (temperature 1, no top-p cut), long enough for a whole candidate."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 4096
    # A fixed seed per request (OpenAI-compatible `seed`; torch.manual_seed before each local generate):
    # the same prompt then gets the same reply, so episodes of one task would repeat. None: independent samples.
    seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ChatReply:
    """One generated reply.

    `text`: the reply. `finish_reason`: "stop" (end of sequence / stop string), "length" (cut at
    max_new_tokens) or what the server said. `prompt_token_ids`: the exact ids the model was
    conditioned on (None when the backend does not give them). `token_ids`: the generated ids;
    `logprobs`: one log-probability per generated token, recorded at generation time (see
    agents.trajectory for their exact meaning per backend). `usage`: {"prompt_tokens",
    "completion_tokens"}.
    """

    text: str
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: dict[str, int] = field(default_factory=dict)


class ChatBackend(abc.ABC):
    """A chat model. `chat` may be called from several threads at once.

    `name` is the backend kind ("openai", "transformers", "scripted"); `model` names the model.
    """

    name: str = "chat"
    model: str = ""
    sampling: SamplingConfig = SamplingConfig()

    @abc.abstractmethod
    def chat(self, messages: list[Message]) -> ChatReply:
        """The model's reply to `messages`. Raises `BackendError` when no reply could be had."""

    def count_tokens(self, messages: list[Message]) -> int:
        """Tokens `messages` take as a prompt. This default estimates 1 token per 3 characters
        (source code runs at about 3-4); backends with a tokenizer count exactly."""
        return sum(len(m.get("content") or "") + 8 for m in messages) // 3 + 1

    def close(self) -> None:
        """Release clients and models (idempotent)."""
