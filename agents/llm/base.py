"""The one chat interface every backend implements: messages in, a `ChatReply` out."""
from __future__ import annotations

import abc
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

# OpenAI-style chat messages: {"role": "system" | "user" | "assistant", "content": str}; with function
# calling also {"role": "assistant", "content": str, "tool_calls": [{"id", "type": "function",
# "function": {"name", "arguments": JSON text}}]} and {"role": "tool", "tool_call_id": id, "content": str}.
Message = dict[str, Any]
ToolCall = dict[str, str]  # {"id": str, "name": str, "arguments": JSON text}
_TOOL_CALL_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


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
    cuda_gym.trajectory for their exact meaning per backend). `usage`: {"prompt_tokens",
    "completion_tokens"}. `tool_calls`: the function calls of the reply, each {"id", "name",
    "arguments" (JSON text)}, in order, when tools were offered and the model called any (else None).
    """

    text: str
    finish_reason: str | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    tool_calls: list[ToolCall] | None = None


def parse_tool_calls(text: str, id_prefix: str = "call") -> list[ToolCall]:
    """Function calls written as text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
    blocks (the Hermes / Qwen chat templates' format), or, without such blocks, the whole text when
    it is one JSON object with a string "name". Blocks that are not such JSON are skipped. Never raises."""
    blocks = _TOOL_CALL_TAG.findall(text) if isinstance(text, str) else []
    if not blocks and isinstance(text, str) and text.strip().startswith("{"):
        blocks = [text.strip()]
    calls = []
    for block in blocks:
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        arguments = call.get("arguments", call.get("parameters", {}))
        calls.append({"id": f"{id_prefix}_{len(calls)}", "name": call["name"],
                      "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)})
    return calls


class ChatBackend(abc.ABC):
    """A chat model. `chat` may be called from several threads at once.

    `name` is the backend kind ("openai", "transformers", "scripted"); `model` names the model.
    """

    name: str = "chat"
    model: str = ""
    sampling: SamplingConfig = SamplingConfig()

    @abc.abstractmethod
    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> ChatReply:
        """The model's reply to `messages`. `tools`: OpenAI function schemas the model may call
        (the reply's `tool_calls`). Raises `BackendError` when no reply could be had."""

    def count_tokens(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> int:
        """Tokens `messages` (and the `tools` schemas) take as a prompt. This default estimates 1
        token per 3 characters (source code runs at about 3-4), tool calls' arguments included;
        backends with a tokenizer count exactly."""
        chars = sum(len(m.get("content") or "") + 8 + sum(len(json.dumps(c)) for c in m.get("tool_calls") or ())
                    for m in messages)
        return (chars + (len(json.dumps(tools)) if tools else 0)) // 3 + 1

    def close(self) -> None:
        """Release clients and models (idempotent)."""
