"""`OpenAIChat`: any OpenAI-compatible chat-completions server (vLLM, SGLang, a hosted API)."""
from __future__ import annotations

import json
import os
import random
import time
from typing import Any

from .base import BackendError, ChatBackend, ChatReply, Message, SamplingConfig

RETRYABLE_STATUS = (408, 409, 429, 500, 502, 503, 504)


class OpenAIChat(ChatBackend):
    """Chat completions through the `openai` client.

    base_url: the server's OpenAI API root, e.g. "http://localhost:8000/v1". api_key: the key
    (default: $OPENAI_API_KEY, else "EMPTY", which local vLLM / SGLang servers accept).
    timeout_s: per request. A request that times out, cannot connect, or gets a 408/409/429/5xx
    status is retried up to `retries` times, waiting `backoff_s * 2**attempt` seconds (capped at
    60, with up to 10% jitter) in between; then, or at once for other errors (400, 401, 404: a
    wrong model name, key or URL), `chat` raises `BackendError` saying what failed.
    logprobs: ask for per-token logprobs (`logprobs=True`). return_token_ids: ask vLLM (>= 0.10.2)
    for the prompt and generated token ids (`return_token_ids=True`, its response fields
    `prompt_token_ids` and `choices[0].token_ids`); servers that do not know it may reject it.
    extra_body: more request fields for the server (e.g. {"top_k": 20}).

    Function calling: `chat(messages, tools=[...])` sends the OpenAI function schemas as `tools`
    (the server picks, as with `tool_choice="auto"`); the reply's `message.tool_calls` become
    `ChatReply.tool_calls`. vLLM needs `--enable-auto-tool-choice --tool-call-parser <parser>`
    (e.g. hermes for Qwen), SGLang `--tool-call-parser <parser>` (e.g. qwen25); see docs/workspace.md.
    """

    name = "openai"

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None,
                 sampling: SamplingConfig | None = None, timeout_s: float = 600.0, retries: int = 3,
                 backoff_s: float = 2.0, logprobs: bool = True, return_token_ids: bool = False,
                 extra_body: dict[str, Any] | None = None):
        try:
            import openai
        except ImportError:
            raise ImportError("OpenAIChat needs the openai package: pip install 'cuda_gym[agents]'") from None
        self._openai = openai
        self.base_url = base_url
        self.model = model
        self.sampling = sampling or SamplingConfig()
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.logprobs = bool(logprobs)
        self.return_token_ids = bool(return_token_ids)
        self.extra_body = dict(extra_body or {})
        # Retries are ours (counted, logged in the error), not the client's.
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
                                     timeout=self.timeout_s, max_retries=0)

    def _request(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        sampling = self.sampling
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": sampling.temperature,
                                  "top_p": sampling.top_p, "max_tokens": sampling.max_new_tokens}
        if tools:
            kwargs["tools"] = tools
        if sampling.seed is not None:
            kwargs["seed"] = sampling.seed
        if self.logprobs:
            kwargs["logprobs"] = True
        extra = dict(self.extra_body)
        if self.return_token_ids:
            extra["return_token_ids"] = True
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _retryable(self, exc: Exception) -> bool:
        openai = self._openai
        if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
            return True
        return isinstance(exc, openai.APIStatusError) and exc.status_code in RETRYABLE_STATUS

    def chat(self, messages: list[Message], tools: list[dict[str, Any]] | None = None) -> ChatReply:
        request = self._request(messages, tools)
        failures: list[str] = []
        for attempt in range(self.retries + 1):
            try:
                response = self._client.chat.completions.create(**request)
            except self._openai.OpenAIError as exc:
                failures.append(_describe(exc))
                if not self._retryable(exc):
                    raise BackendError(f"{self.base_url} (model {self.model!r}) refused the request: {failures[-1]}. "
                                       "Check --base-url, --model and --api-key.") from None
                if attempt < self.retries:
                    delay = min(60.0, self.backoff_s * 2 ** attempt)
                    time.sleep(delay * (1.0 + 0.1 * random.random()))
                continue
            return _parse(response.model_dump(), self.base_url)
        raise BackendError(f"{self.base_url} (model {self.model!r}) failed {len(failures)} times "
                           f"({self.retries} retries): " + "; ".join(failures) +
                           ". Is the server up and the model served? (timeout per request: "
                           f"{self.timeout_s:g} s)")

    def close(self) -> None:
        self._client.close()


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    kind = type(exc).__name__
    text = str(exc).strip().replace("\n", " ")
    text = text if len(text) <= 300 else text[:300] + "..."
    return f"{kind} (HTTP {status}): {text}" if status else f"{kind}: {text}"


def _parse(data: dict[str, Any], where: str) -> ChatReply:
    choices = data.get("choices") or []
    if not choices:
        raise BackendError(f"{where} answered without choices: {str(data)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    text = message.get("content") or ""
    logprobs = None
    content = (choice.get("logprobs") or {}).get("content")
    if content:
        logprobs = [float(entry["logprob"]) for entry in content]
    token_ids = choice.get("token_ids")
    prompt_token_ids = data.get("prompt_token_ids") or choice.get("prompt_token_ids")
    usage = data.get("usage") or {}
    tool_calls = []
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        if not isinstance(function.get("name"), str):
            continue
        arguments = function.get("arguments")
        tool_calls.append({"id": str(call.get("id") or f"call_{index}"), "name": function["name"],
                           "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {})})
    return ChatReply(
        tool_calls=tool_calls or None,
        text=text, finish_reason=choice.get("finish_reason"),
        prompt_token_ids=[int(t) for t in prompt_token_ids] if prompt_token_ids else None,
        token_ids=[int(t) for t in token_ids] if token_ids else None, logprobs=logprobs,
        usage={"prompt_tokens": int(usage.get("prompt_tokens") or 0),
               "completion_tokens": int(usage.get("completion_tokens") or 0)},
    )


def chat_backend(*, base_url: str, model: str, api_key: str | None = None, temperature: float = 1.0,
                 max_new_tokens: int = 1024, seed: int | None = None) -> OpenAIChat:
    """The `openai` entry of the `cuda_gym.chat_backends` group (`cuda_gym.chat.open_chat_backend`): a
    plain-text client, without logprobs, for cuda_gym's own model calls (task synthesis)."""
    return OpenAIChat(base_url, model, api_key=api_key, logprobs=False,
                      sampling=SamplingConfig(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed))

