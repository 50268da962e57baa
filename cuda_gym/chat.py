"""The chat protocol that cuda_gym's own model calls (task synthesis) rely on, and how a command finds
a backend for it without importing the package that provides one.

A chat model is any object with `chat(messages)`, where messages are OpenAI-style
`{"role": ..., "content": ...}` dicts, returning a reply with a `.text` (or a plain string). The
agents package's backends (`cuda_gym_agents.llm`: `OpenAIChat`, `TransformersChat`, `ScriptedChat`)
follow it. Commands that need a model by address (`cuda-gym synth --composer llm`) ask for one with
`open_chat_backend`, which loads a factory registered under the `cuda_gym.chat_backends` entry point
group; cuda_gym itself never imports a backend package.
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

CHAT_BACKEND_ENTRY_POINT_GROUP = "cuda_gym.chat_backends"


class ChatReplyLike(Protocol):
    text: str


@runtime_checkable
class ChatModel(Protocol):
    """Turns chat messages into one reply (an object with `.text`, or a string)."""

    def chat(self, messages: list[dict[str, Any]]) -> ChatReplyLike | str: ...


class ChatBackendNotFound(ImportError):
    """No installed package registers a chat backend of the requested name."""


def open_chat_backend(name: str, *, base_url: str, model: str, api_key: str | None = None,
                      temperature: float = 1.0, max_new_tokens: int = 1024, seed: int | None = None) -> ChatModel:
    """A chat model served at `base_url` (an OpenAI-compatible server for `name="openai"`), built by the
    factory registered as `name` in the `cuda_gym.chat_backends` entry point group."""
    from importlib.metadata import entry_points

    found = [entry_point for entry_point in entry_points(group=CHAT_BACKEND_ENTRY_POINT_GROUP) if entry_point.name == name]
    if not found:
        raise ChatBackendNotFound(
            f"no chat backend {name!r} is installed (entry point group {CHAT_BACKEND_ENTRY_POINT_GROUP!r}); it comes "
            "with the agents package cuda_gym_agents: install cuda_gym with pip (`pip install -e '.[agents]'` in a "
            "checkout)")
    factory = found[0].load()
    return factory(base_url=base_url, model=model, api_key=api_key, temperature=temperature,
                   max_new_tokens=max_new_tokens, seed=seed)
