"""Episode records: `Turn`, `Trajectory`, `BestCandidate`, and the JSONL file that holds them.

One `Trajectory` is one episode of one task played by one policy; `rollout` writes one JSON line
per trajectory to `trajectories.jsonl` as soon as the episode ends (`append_trajectory`), so a
crash loses at most the episodes still being played. PPO (issue 14) and the leaderboard (issue 19)
read these records; every field below means exactly what its line says.

`Turn` (one model reply and the environment step it became):

- `index`: 1-based turn number, equal to the environment's `info["turn"]`.
- `messages`: the chat messages sent to the backend for this turn, OpenAI-style dicts
  `{"role": "system"|"user"|"assistant", "content": str}`, after context management (older
  feedback and candidates may be shortened; see `cuda_gym_agents.react`). The reply is not in it.
- `reply`: the model's text exactly as the backend returned it.
- `command`: the command the environment ran ("compile", "check", "eval", "submit"), or None when
  the reply was malformed and nothing ran (`error_code == "INVALID_ACTION"`).
- `candidate`: the code block the policy extracted from the reply (None when it had none). The
  action stepped is a function of `reply` alone: `cuda_gym_agents.react.action_for(parse_reply(reply), reply)`
  (`#! <command, default eval>` + newline + candidate when there was a block, else the raw reply).
- `observation`: the environment's feedback text for this step (what the model reads next).
- `reward`: the environment's reward for this step (per-step or final mode as configured).
- `error_code`: the verdict the model was shown: an `ErrorCode` value ("OK", "COMPILE_ERROR", ...),
  or "COMPILED" for a compile step that built (compile reports only the build).
- `speedup_vs_eager`, `speedup_vs_compile`: the step's speedups (None unless a full eval/submit
  measured them).
- `result`: the environment's `EvalResult` dict (`info["result"]`: every key, None where not
  measured; `EvalResult.from_dict` rebuilds it), or None when nothing was evaluated.
- `generation_seconds`: wall time of the backend call; `eval_seconds`: wall time of `env.step`.
- `prompt_token_ids`: the exact token ids the model was conditioned on for this reply (the chat
  template applied to `messages`, generation prompt included), when the backend has them
  (TransformersChat; OpenAI-compatible servers that return them), else None.
- `token_ids`: the generated token ids, in order, as sampled (the end-of-sequence token included
  when generation stopped on it); None when the backend does not give them.
- `logprobs`: per generated token, its log-probability recorded at generation time (one float per
  entry of `token_ids`); None when not given. TransformersChat records `log_softmax(logits)` of the
  model's raw next-token logits (its own distribution, before temperature / top-p: what a forward
  pass over `prompt_token_ids + token_ids` recomputes); OpenAI-compatible servers report their own
  (vLLM by default the same raw logprobs; `Trajectory.sampling` has the temperature used). PPO
  trains on `prompt_token_ids + token_ids` with these as the old-policy logprobs and never
  re-tokenises text.
- `usage`: `{"prompt_tokens": int, "completion_tokens": int}` as the backend counted them.
- `finish_reason`: why generation stopped: "stop" (end of sequence or a stop string), "length"
  (hit max_new_tokens; the reply is cut), or what the server said.
- `tool_calls`: in workspace episodes (tool calling, `cuda_gym_agents.react.ToolReactPolicy`), the reply's
  function calls, each `{"id", "name", "arguments" (JSON text)}`; the first was stepped and
  `observation` is its result (any others were answered "not run"). None in text episodes.
  There `command` is the evaluation a judging tool ran ("compile", "check" for verify, "eval" for
  profile, "submit") and None for file tools and bad calls; `error_code` is the environment's
  verdict ("TOOL_OK", "TOOL_ERROR", "INVALID_ACTION", "COMPILED" or an `ErrorCode` value);
  `candidate` is the packed workdir that was judged (`cuda_gym.eval.candidate.unpack_files`).

`Trajectory`: `task_id`, `level`, `episode` (0-based index of this episode among the task's
episodes in a rollout), `backend` (the chat backend: "openai", "transformers", "scripted"), `model`
(the model name or checkpoint path), `env_backend` ("cpu"/"cuda"), `turns`, `end_reason`, `error`,
`total_reward` (sum of the turns' rewards), `seconds` (wall time of the episode), `max_turns` (the
environment's turn budget), `sampling` (the backend's `SamplingConfig` as a dict: temperature,
top_p, max_new_tokens, seed).

`end_reason` is one of `END_REASONS`:
- "submit": a well-formed `#! submit` was judged (the episode terminated);
- "max_turns": the turn budget ran out (the environment truncated the episode);
- "context_budget": the next prompt would not fit the context budget even after shortening;
- "backend_error": the chat backend failed after its retries (`error` holds the message); every
  turn before the failure is kept;
- "env_error": the environment raised (`error` holds the message).

`Trajectory.best()` is CUDA Agent's best-in-trajectory candidate: among the turns, correct ones
first (verdict OK on check/eval/submit), then the highest speedup vs torch.compile, then vs eager
(a speedup that was not measured ranks below any measured one), then fully evaluated over
check-only; among incorrect turns, the one that got furthest (ran but wrong > built > failed to
build > malformed), the latest on ties.
"""
from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, Iterable

END_REASONS = ("submit", "max_turns", "context_budget", "backend_error", "env_error")
JUDGED_COMMANDS = ("check", "eval", "submit")  # commands whose OK verdict means "correct"

# How far an incorrect turn got; higher is further (the best of an unsolved trajectory).
_PROGRESS = {
    "INCORRECT": 4, "FORBIDDEN": 4, "RUNTIME_ERROR": 3, "TIMEOUT": 3, "OUT_OF_MEMORY": 3,
    "COMPILED": 2, "COMPILE_ERROR": 1, "COMPILE_TIMEOUT": 1,
}


@dataclass
class Turn:
    """One model reply and the environment step it became (fields: see the module docstring)."""

    index: int
    messages: list[dict[str, str]]
    reply: str
    command: str | None
    observation: str
    reward: float
    error_code: str
    candidate: str | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    result: dict[str, Any] | None = None
    generation_seconds: float = 0.0
    eval_seconds: float = 0.0
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    finish_reason: str | None = None
    tool_calls: list[dict[str, str]] | None = None

    @property
    def correct(self) -> bool:
        """The candidate was judged correct (a compile step's short check does not count)."""
        return self.error_code == "OK" and self.command in JUDGED_COMMANDS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Turn":
        return cls(**_known_fields(cls, data))


@dataclass
class BestCandidate:
    """The best candidate of a trajectory (see `Trajectory.best`)."""

    turn: int
    command: str | None
    correct: bool
    error_code: str
    speedup_vs_eager: float | None
    speedup_vs_compile: float | None
    candidate: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Trajectory:
    """One episode (fields: see the module docstring)."""

    task_id: str
    level: int
    episode: int
    backend: str
    model: str
    turns: list[Turn] = field(default_factory=list)
    end_reason: str = "max_turns"
    error: str = ""
    total_reward: float = 0.0
    env_backend: str = ""
    max_turns: int = 0
    seconds: float = 0.0
    sampling: dict[str, Any] = field(default_factory=dict)

    def best(self) -> BestCandidate | None:
        """CUDA Agent's best-in-trajectory candidate, or None for a trajectory without turns."""
        if not self.turns:
            return None
        turn = max(self.turns, key=lambda t: (best_rank(t), t.index))
        return BestCandidate(turn=turn.index, command=turn.command, correct=turn.correct,
                             error_code=turn.error_code, speedup_vs_eager=turn.speedup_vs_eager,
                             speedup_vs_compile=turn.speedup_vs_compile, candidate=turn.candidate)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["turns"] = [t.to_dict() for t in self.turns]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        data = _known_fields(cls, data)
        data["turns"] = [Turn.from_dict(t) for t in data.get("turns", [])]
        return cls(**data)


def best_rank(candidate: Turn | BestCandidate) -> tuple:
    """The sort key of `Trajectory.best()` without the turn-order tie-break (higher is better):
    correct first, then speedup vs compile, vs eager, fully evaluated over check-only; for
    incorrect candidates, how far they got. Also ranks best candidates across episodes."""
    if candidate.correct:
        return (1, _speedup_key(candidate.speedup_vs_compile), _speedup_key(candidate.speedup_vs_eager),
                candidate.command != "check")
    return (0, _PROGRESS.get(candidate.error_code, 0))


def _speedup_key(value: float | None) -> float:
    return -math.inf if value is None or math.isnan(value) else float(value)


def _known_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"a {cls.__name__} record must be a JSON object, got {type(data).__name__}")
    names = {f.name for f in fields(cls)}
    required = {f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING}
    missing = sorted(required - set(data))
    if missing:
        raise ValueError(f"a {cls.__name__} record lacks the fields {missing}")
    return {k: v for k, v in data.items() if k in names}


# ----------------------------------------------------------------------------------- JSONL

_WRITE_LOCK = threading.Lock()


def append_trajectory(path: str | os.PathLike, trajectory: Trajectory) -> None:
    """Append `trajectory` as one JSON line to `path` (created if missing), flushed and synced.

    Safe to call from several threads at once: lines never interleave.
    """
    line = json.dumps(trajectory.to_dict()) + "\n"
    with _WRITE_LOCK:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    """All trajectories in a JSONL file (blank lines skipped).

    A line that is not valid JSON or not a trajectory raises `ValueError` naming the file and line.
    """
    trajectories = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                trajectories.append(Trajectory.from_dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a trajectory record ({exc}); the file may have been cut "
                                 "by a crash: remove or repair that line") from None
    return trajectories


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> None:
    """Write `trajectories` to `path` (replacing it), one JSON line each."""
    with open(path, "w", encoding="utf-8") as handle:
        for trajectory in trajectories:
            handle.write(json.dumps(trajectory.to_dict()) + "\n")
