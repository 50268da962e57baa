"""`ScriptedChat`: replays given replies, for tests and demos."""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from .base import BackendError, ChatBackend, ChatReply, Message, SamplingConfig


class ScriptedChat(ChatBackend):
    """Replies from a script instead of a model.

    `replies` is either a sequence (each item a reply text, a `ChatReply` (e.g. with `tool_calls`),
    or an exception to raise, e.g. `BackendError`, served in order to whoever calls next) or a
    callable `messages -> item` (for rollouts of many episodes at once, where the reply must depend
    on the conversation). When a sequence runs out, `chat` raises `BackendError`. `tools` is
    recorded per call (`self.tools`) and otherwise ignored: the script decides what is called.
    """

    name = "scripted"

    def __init__(self, replies: Iterable[str | ChatReply | BaseException] | Callable[[list[Message]], object],
                 model: str = "scripted", sampling: SamplingConfig | None = None):
        self.model = model
        self.sampling = sampling or SamplingConfig()  # only its max_new_tokens matters (context budget)
        self._script = replies if callable(replies) else None
        self._queue = None if callable(replies) else list(replies)
        self._lock = threading.Lock()
        self.calls: list[list[Message]] = []  # the messages of every call, in order
        self.tools: list[list[dict] | None] = []  # the tools offered in every call, in order

    def chat(self, messages: list[Message], tools: list[dict] | None = None) -> ChatReply:
        with self._lock:
            self.calls.append([dict(m) for m in messages])
            self.tools.append(tools)
            if self._script is not None:
                item = self._script(messages)
            elif self._queue:
                item = self._queue.pop(0)
            else:
                raise BackendError(f"ScriptedChat has no reply left (it served {len(self.calls) - 1}); "
                                   "give it more replies or fewer turns")
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, ChatReply):
            return item
        text = str(item)
        return ChatReply(text=text, finish_reason="stop",
                         usage={"prompt_tokens": self.count_tokens(messages), "completion_tokens": len(text) // 3})
