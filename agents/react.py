"""The ReAct policy: a chat model plays one `KernelEnv` episode, reading feedback and acting on it.

`ReactPolicy.play(env, chat, task)` runs one episode and returns its `Trajectory`; it never raises
for what a model or server does (malformed replies get the environment's own INVALID_ACTION
feedback; a backend failure ends the trajectory with `end_reason="backend_error"`, every turn
before it kept).

The conversation the model sees:

- system: the environment's task prompt (reference, target, rules, candidate format, actions)
  followed by `WORKFLOW_GUIDE`;
- user: `START_MESSAGE`;
- then per turn: assistant (the model's reply) and user (the environment's feedback).

Context management: when the prompt plus `max_new_tokens` would not fit `context_tokens`, older
turns are shortened, oldest first (a reply keeps its text around a one-line stand-in for its
candidate, feedback keeps its verdict line and the reward), then dropped (one note says how many),
while the system prompt, the turn holding the best candidate so far (the environment's
`info["best"]`) and the latest feedback always stay whole. If it still does not fit, the episode
ends with `end_reason="context_budget"`.

`ToolReactPolicy` is the same loop through function calling, on `WorkspaceEnv` (CUDA Agent's
workspace, docs/workspace.md): the environment's tool schemas are offered on every call and each
reply's first tool call is the action.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from .llm.base import BackendError, ChatBackend, Message, parse_tool_calls
from cuda_gym.trajectory import Trajectory, Turn

WORKFLOW_GUIDE = """\
## How to work
You have a budget of turns; use them to get a correct kernel first, then a fast one.
1. Read the reference program and work out what it computes: the shapes from get_inputs() (with
   the backend's size overrides), the dtype, and which parts cost the most time.
2. Write a first, simple candidate in the recommended form: your kernels as plain C++/CUDA with
   extern "C" entry points, loaded with cuda_gym.native.load_kernels. Keep the reference's
   parameters (self.weight, ...) and pass their tensors to your kernels.
3. Send it with `#! compile` (only the build) or `#! check` (build + correctness on every input
   draw). Fix compiler errors and wrong results before anything else.
4. Once it is correct, send `#! eval` to measure it against PyTorch eager and torch.compile
   (the baseline times and speedups are in the feedback).
5. Make it faster and eval again: fuse operations, use all cores / threads, vectorize, tile for
   the cache or shared memory, avoid extra passes over memory. Keep the best correct version in
   mind: a faster but wrong kernel is worth nothing.
6. When it is correct and faster than torch.compile (or you are near the end of your turns),
   send your best candidate with `#! submit`. That ends the episode.
Strict rules: the forward may allocate outputs, make views, make small constants (zeros, full,
arange ...) and move or compute on them, and call your own compiled code; PyTorch compute on the
task's data (inputs, weights, anything made from them) makes the verdict FORBIDDEN. Make constants
before your first kernel call. Never modify the inputs, never cache outputs between calls, never
change global settings.

## Reply format
Think briefly, then end your reply with exactly one command line and one fenced code block:

#! check
```python
import torch
...
class ModelNew(nn.Module):
    ...
```
The command is one of #! compile, #! check, #! eval, #! submit. The code block must be a whole
Python file that defines class ModelNew."""

START_MESSAGE = ("Write your first candidate ModelNew for the task above. End your reply with a command line "
                 "(#! compile, #! check, #! eval or #! submit) and one ```python code block.")

_COMMAND_LINE = re.compile(r"^[ \t]*#![ \t]*([A-Za-z_]+)\b[^\n]*$", re.M)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_CUT_NOTE = ("\nNote: your reply was cut at the generation limit ({limit} tokens) before it ended; "
             "send a shorter reply (less explanation, a more compact candidate).")


@dataclass
class ParsedReply:
    """What a reply asks for. `command`: the word of its `#!` line (lower case, may be unknown), or
    None. `candidate`: the source of its code block (the last one defining ModelNew, else the last
    one), without a leading command line, or None. `text`: the reply with the block removed."""

    command: str | None
    candidate: str | None
    text: str


def parse_reply(reply: str) -> ParsedReply:
    """Split a model reply into its command, candidate and the text around them. Never raises."""
    reply = reply if isinstance(reply, str) else str(reply)
    blocks = [m for m in _FENCE.finditer(reply) if m.group(1).lower() in ("", "python", "py", "python3")]
    chosen = None
    if blocks:
        with_model = [m for m in blocks if "class ModelNew" in m.group(2)]
        chosen = (with_model or blocks)[-1]
    command = None
    candidate = None
    text = reply
    if chosen is not None:
        candidate = chosen.group(2)
        text = reply[:chosen.start()] + reply[chosen.end():]
        first, _, rest = candidate.lstrip().partition("\n")
        inner = _COMMAND_LINE.match(first)
        if inner:  # a command line opening the block
            command, candidate = inner.group(1).lower(), rest
    outer = _COMMAND_LINE.findall(text)
    if outer:  # the command line nearest the block (the last one outside it) wins
        command = outer[-1].lower()
    return ParsedReply(command=command, candidate=candidate, text=text.strip())


def action_for(parsed: ParsedReply, reply: str) -> str:
    """The action to step: `#! <command>` + the candidate when the reply has a code block (the
    default command is eval, as in the environment), else the raw reply, so the environment says
    what is wrong with it."""
    if parsed.candidate is None or not parsed.candidate.strip():
        return reply
    return f"#! {parsed.command or 'eval'}\n{parsed.candidate}"


@dataclass
class ReactConfig:
    """Settings of the policy. context_tokens: the prompt plus `max_new_tokens` must fit this
    (set it to the served model's context length). shortened_chars: how much of an older reply's
    text around its candidate is kept when it is shortened."""

    context_tokens: int = 32768
    shortened_chars: int = 400
    guide: bool = True


@dataclass
class _Exchange:
    turn: int
    reply: str
    observation: str
    note: str  # appended to the observation in the model's view (e.g. the reply was cut)
    parsed: ParsedReply
    error_code: str


class ReactPolicy:
    """Plays episodes with a chat backend (see the module docstring)."""

    def __init__(self, config: ReactConfig | None = None):
        self.config = config or ReactConfig()

    def system_prompt(self, task_prompt: str) -> str:
        return task_prompt.rstrip() + ("\n\n" + WORKFLOW_GUIDE if self.config.guide else "")

    # ----------------------------------------------------------------------------- messages
    def _shortened_reply(self, exchange: _Exchange) -> str:
        limit = self.config.shortened_chars
        text = exchange.parsed.text if exchange.parsed.candidate is not None else exchange.reply
        if len(text) > limit:
            text = text[: limit // 2] + " [...] " + text[-(limit // 2):]
        if exchange.parsed.candidate is not None:
            lines = exchange.parsed.candidate.count("\n") + 1
            text += (f"\n[turn {exchange.turn}: candidate of {lines} lines omitted to save context; "
                     f"verdict {exchange.error_code}]")
        return text

    @staticmethod
    def _shortened_feedback(exchange: _Exchange) -> str:
        lines = exchange.observation.splitlines()
        kept = lines[:1] + [line for line in lines[1:] if line.startswith("Reward:")]
        return "\n".join(kept + ["[feedback shortened to save context]"])

    def messages(self, system: str, exchanges: list[_Exchange], best_turn: int | None,
                 shorten: int = 0, drop: int = 0) -> list[Message]:
        """The conversation: the oldest `drop` exchanges left out, the next `shorten` shortened;
        the best candidate's reply and the latest feedback are never shortened or dropped."""
        out: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": START_MESSAGE}]
        last = len(exchanges) - 1
        dropped = 0
        for index, exchange in enumerate(exchanges):
            keep_reply = exchange.turn == best_turn
            if index < drop and not keep_reply and index != last:
                dropped += 1
                continue
            if dropped:
                out[-1] = {"role": out[-1]["role"], "content": out[-1]["content"] +
                           f"\n[{dropped} earlier turn(s) left out to save context]"}
                dropped = 0
            old = index < drop + shorten
            reply = exchange.reply if keep_reply or not old else self._shortened_reply(exchange)
            feedback = (exchange.observation if index == last or not old else self._shortened_feedback(exchange))
            out.append({"role": "assistant", "content": reply})
            out.append({"role": "user", "content": feedback + exchange.note})
        return out

    def _fit(self, chat: ChatBackend, system: str, exchanges: list[_Exchange],
             best_turn: int | None) -> list[Message] | None:
        """The fullest conversation that fits the context budget, or None."""
        room = self.config.context_tokens - chat.sampling.max_new_tokens
        count = len(exchanges)
        # From fullest to shortest: shorten more and more of the oldest turns, then drop the oldest
        # (everything kept shortened). Each step shrinks the prompt, so bisect for the first that fits.
        tries = [(0, shorten) for shorten in range(count + 1)] + [(drop, count - drop) for drop in range(1, count + 1)]

        def attempt(index: int) -> list[Message] | None:
            drop, shorten = tries[index]
            messages = self.messages(system, exchanges, best_turn, shorten=shorten, drop=drop)
            return messages if chat.count_tokens(messages) <= room else None

        fitting = attempt(0)
        if fitting is not None:
            return fitting
        low, high = 0, len(tries) - 1  # tries[low] does not fit; find the first that does
        fitting = attempt(high)
        if fitting is None:
            return None
        while high - low > 1:
            middle = (low + high) // 2
            messages = attempt(middle)
            if messages is None:
                low = middle
            else:
                high, fitting = middle, messages
        return fitting

    # ------------------------------------------------------------------------------- playing
    def _ask(self, chat: ChatBackend, messages: list[Message] | None, trajectory: Trajectory,
             **kwargs: Any) -> tuple[Any, float]:
        """The backend's reply to `messages` (`kwargs` go to `chat.chat`) and its seconds, or
        (None, 0) with the trajectory's end reason set: the conversation did not fit (`messages`
        is None) or the backend failed."""
        if messages is None:
            trajectory.end_reason = "context_budget"
            trajectory.error = (f"the conversation does not fit {self.config.context_tokens} tokens with "
                                f"{chat.sampling.max_new_tokens} for the reply, even shortened")
            return None, 0.0
        started = time.monotonic()
        try:
            reply = chat.chat(messages, **kwargs)
        except Exception as exc:  # BackendError after retries, or anything else a backend raised
            message = str(exc) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"
            trajectory.end_reason, trajectory.error = "backend_error", message
            return None, 0.0
        return reply, time.monotonic() - started

    def play(self, env: Any, chat: ChatBackend, task: Any, *, episode: int = 0, seed: int | None = None) -> Trajectory:
        """Play one episode of `task` (a cuda_gym Task) in `env` (a KernelEnv) with `chat`."""
        started = time.monotonic()
        prompt, info = env.reset(seed=seed, options={"task": task})
        trajectory = _new_trajectory(info, chat, episode)
        system = self.system_prompt(prompt)
        exchanges: list[_Exchange] = []
        best_turn: int | None = None
        while True:
            messages = self._fit(chat, system, exchanges, best_turn)
            reply, generation_seconds = self._ask(chat, messages, trajectory)
            if reply is None:
                break
            text = reply.text if isinstance(reply.text, str) else ""
            parsed = parse_reply(text)
            step_started = time.monotonic()
            try:
                observation, reward, terminated, truncated, step_info = env.step(action_for(parsed, text))
            except Exception as exc:  # the environment itself failed: keep what was played
                trajectory.end_reason, trajectory.error = "env_error", f"{type(exc).__name__}: {exc}"
                break
            eval_seconds = time.monotonic() - step_started
            verdict = step_info["verdict"]
            invalid = verdict == "INVALID_ACTION"
            command = None if invalid else step_info["command"]
            if command == "compile" and step_info["compiled"]:
                verdict = "COMPILED"
            result = None if invalid else step_info.get("result")
            turn = Turn(
                index=int(step_info["turn"]), messages=messages, reply=text, command=command,
                candidate=parsed.candidate,
                observation=observation, reward=float(reward), error_code=verdict,
                speedup_vs_eager=(result or {}).get("speedup_vs_eager"),
                speedup_vs_compile=(result or {}).get("speedup_vs_compile"), result=result,
                generation_seconds=generation_seconds, eval_seconds=eval_seconds,
                prompt_token_ids=reply.prompt_token_ids, token_ids=reply.token_ids, logprobs=reply.logprobs,
                usage=dict(reply.usage), finish_reason=reply.finish_reason,
            )
            trajectory.turns.append(turn)
            trajectory.total_reward += turn.reward
            best = step_info.get("best") or {}
            if best.get("found"):
                best_turn = int(best["turn"])
            note = _CUT_NOTE.format(limit=chat.sampling.max_new_tokens) if reply.finish_reason == "length" else ""
            exchanges.append(_Exchange(turn=turn.index, reply=text, observation=observation, note=note,
                                       parsed=parsed, error_code=verdict))
            if terminated or truncated:
                trajectory.end_reason = "submit" if terminated else "max_turns"
                break
        trajectory.seconds = time.monotonic() - started
        return trajectory


# ------------------------------------------------------------------------- function calling

TOOL_GUIDE = """\
## How to work
Act through the tools, one call per turn. Read GUIDE.md first (the file layout, the binding
registry, the rules). Profile the reference before you write anything, then write kernels/, their
bindings and model_new.py; compile until it builds, verify until it is correct, profile to see
where the time goes and make it faster; submit your best correct version before the turns run out."""

TOOL_START_MESSAGE = "Start with read_file GUIDE.md, then profile the reference. Call one tool per turn."
_NOT_RUN = "error: not run: call one tool per turn (only the first call of a reply runs); call it again"


@dataclass
class _ToolExchange:
    turn: int
    assistant: Message  # the reply as the conversation holds it (content, tool_calls)
    results: list[Message]  # the tool messages (or one user message) answering it
    error_code: str


class ToolReactPolicy(ReactPolicy):
    """The ReAct loop through function calling, on a `WorkspaceEnv` (CUDA Agent's workspace).

    The model sees the environment's reset text plus `TOOL_GUIDE` as the system prompt,
    `TOOL_START_MESSAGE`, and is offered `env.unwrapped.tool_schemas` on every call. Each reply is
    one turn: its first tool call (the backend's `tool_calls`, else `<tool_call>` blocks or a JSON
    object in its text, `cuda_gym_agents.llm.parse_tool_calls`) is stepped as the action, and the result comes
    back as a `tool` message (further calls of the reply get a "not run" result). A reply without
    a call is stepped as text, so the environment says what is wrong with it, and its result
    comes back as a user message. Context: when the conversation does not fit, the oldest turns'
    file contents (write_file / edit_file arguments) and tool results are shortened, then the
    oldest turns dropped, the latest result always whole; if it still does not fit, the episode
    ends with `end_reason="context_budget"`. Never raises for what a model or server does.
    """

    def system_prompt(self, task_prompt: str) -> str:
        return task_prompt.rstrip() + ("\n\n" + TOOL_GUIDE if self.config.guide else "")

    @staticmethod
    def _shortened(exchange: _ToolExchange) -> tuple[Message, list[Message]]:
        assistant = dict(exchange.assistant)
        calls = []
        for call in assistant.get("tool_calls") or []:
            function = dict(call["function"])
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = None
            if isinstance(arguments, dict):
                for key in ("content", "old", "new"):
                    value = arguments.get(key)
                    if isinstance(value, str) and len(value) > 200:
                        arguments[key] = f"[{len(value)} characters omitted to save context; read_file shows the file]"
                function["arguments"] = json.dumps(arguments)
            calls.append(dict(call, function=function))
        if calls:
            assistant["tool_calls"] = calls
        results = []
        for message in exchange.results:
            lines = (message.get("content") or "").splitlines()
            results.append(dict(message, content="\n".join(lines[:1] + ["[result shortened to save context]"])))
        return assistant, results

    def messages(self, system: str, exchanges: list, best_turn: int | None, shorten: int = 0,
                 drop: int = 0) -> list[Message]:
        """The conversation: the oldest `drop` exchanges left out, the next `shorten` shortened;
        the latest result is never shortened or dropped."""
        out: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": TOOL_START_MESSAGE}]
        last = len(exchanges) - 1
        dropped = sum(1 for index in range(len(exchanges)) if index < drop and index != last)
        if dropped:
            out[-1] = dict(out[-1], content=out[-1]["content"] + f"\n[{dropped} earlier turn(s) left out to save context]")
        for index, exchange in enumerate(exchanges):
            if index < drop and index != last:
                continue
            if index < drop + shorten and index != last:
                assistant, results = self._shortened(exchange)
            else:
                assistant, results = exchange.assistant, exchange.results
            out.append(assistant)
            out.extend(results)
        return out

    def play(self, env: Any, chat: ChatBackend, task: Any, *, episode: int = 0, seed: int | None = None) -> Trajectory:
        """Play one episode of `task` in `env` (a WorkspaceEnv) with `chat`, through tool calls."""
        started = time.monotonic()
        prompt, info = env.reset(seed=seed, options={"task": task})
        tools = env.unwrapped.tool_schemas
        trajectory = _new_trajectory(info, chat, episode)
        system = self.system_prompt(prompt)
        exchanges: list[_ToolExchange] = []
        counting = _ToolCounting(chat, tools)
        while True:
            messages = self._fit(counting, system, exchanges, None)
            reply, generation_seconds = self._ask(chat, messages, trajectory, tools=tools)
            if reply is None:
                break
            text = reply.text if isinstance(reply.text, str) else ""
            native_calls = list(reply.tool_calls or [])
            calls = native_calls or parse_tool_calls(text, id_prefix=f"turn{len(exchanges) + 1}")
            action = (json.dumps({"name": calls[0]["name"], "arguments": calls[0]["arguments"]}) if calls else text)
            step_started = time.monotonic()
            try:
                observation, reward, terminated, truncated, step_info = env.step(action)
            except Exception as exc:  # the environment itself failed: keep what was played
                trajectory.end_reason, trajectory.error = "env_error", f"{type(exc).__name__}: {exc}"
                break
            eval_seconds = time.monotonic() - step_started
            result = step_info.get("result")
            turn = Turn(
                index=int(step_info["turn"]), messages=messages, reply=text,
                command=None if step_info["verdict"] == "INVALID_ACTION" else step_info.get("command"),
                candidate=step_info.get("candidate"), observation=observation, reward=float(reward),
                error_code=step_info["verdict"], speedup_vs_eager=(result or {}).get("speedup_vs_eager"),
                speedup_vs_compile=(result or {}).get("speedup_vs_compile"), result=result,
                generation_seconds=generation_seconds, eval_seconds=eval_seconds,
                prompt_token_ids=reply.prompt_token_ids, token_ids=reply.token_ids, logprobs=reply.logprobs,
                usage=dict(reply.usage), finish_reason=reply.finish_reason, tool_calls=calls or None,
            )
            trajectory.turns.append(turn)
            trajectory.total_reward += turn.reward
            note = _CUT_NOTE.format(limit=chat.sampling.max_new_tokens) if reply.finish_reason == "length" else ""
            if native_calls:
                assistant: Message = {"role": "assistant", "content": text, "tool_calls": [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for c in native_calls]}
                results = [{"role": "tool", "tool_call_id": c["id"], "content": (observation + note) if i == 0
                            else _NOT_RUN} for i, c in enumerate(native_calls)]
            else:  # calls written as text (or none): the conversation keeps them as text
                assistant = {"role": "assistant", "content": text}
                extra = f"\n{_NOT_RUN} (calls after the first)" if len(calls) > 1 else ""
                results = [{"role": "user", "content": observation + note + extra}]
            exchanges.append(_ToolExchange(turn=turn.index, assistant=assistant, results=results,
                                           error_code=turn.error_code))
            if terminated or truncated:
                trajectory.end_reason = "submit" if terminated else "max_turns"
                break
        trajectory.seconds = time.monotonic() - started
        return trajectory


def _new_trajectory(info: dict[str, Any], chat: ChatBackend, episode: int) -> Trajectory:
    """An empty trajectory for the episode `env.reset` described in `info`."""
    return Trajectory(task_id=info["task_id"], level=int(info["level"]), episode=episode,
                      backend=chat.name, model=chat.model, env_backend=info["backend"],
                      max_turns=int(info["max_turns"]), sampling=chat.sampling.to_dict())


class _ToolCounting:
    """`chat` for `ReactPolicy._fit`: counts prompt tokens with the tool schemas included."""

    def __init__(self, chat: ChatBackend, tools: list[dict[str, Any]]):
        self.sampling = chat.sampling
        self._chat, self._tools = chat, tools

    def count_tokens(self, messages: list[Message]) -> int:
        return self._chat.count_tokens(messages, tools=self._tools)


__all__ = ["ParsedReply", "ReactConfig", "ReactPolicy", "START_MESSAGE", "TOOL_GUIDE", "TOOL_START_MESSAGE",
           "ToolReactPolicy", "WORKFLOW_GUIDE", "action_for", "parse_reply"]
