"""Chat backends: one interface (`ChatBackend.chat(messages) -> ChatReply`), three backends.

- `OpenAIChat`: an OpenAI-compatible server (vLLM, SGLang, a hosted API), with timeouts and retries;
- `TransformersChat`: a local checkpoint through transformers (token ids and logprobs recorded);
- `ScriptedChat`: replays given replies (tests, demos).

`openai`, `torch` and `transformers` (the `agents` extra) are imported only when a backend that
needs them is built or used.
"""
from .base import BackendError, ChatBackend, ChatReply, Message, SamplingConfig, ToolCall, parse_tool_calls
from .openai_chat import OpenAIChat
from .scripted import ScriptedChat
from .transformers_chat import TransformersChat

__all__ = ["BackendError", "ChatBackend", "ChatReply", "Message", "OpenAIChat", "SamplingConfig", "ScriptedChat",
           "ToolCall", "TransformersChat", "parse_tool_calls"]
