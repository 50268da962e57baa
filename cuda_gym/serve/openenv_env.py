"""The text environment (`KernelEnv`) as an OpenEnv environment (extra `openenv`: openenv-core).

OpenEnv's server (`openenv.core.env_server.create_app`) gives each WebSocket session (`/ws`) its own
environment instance; here each is a `KernelEnv` sharing one evaluator (a local `Evaluator`, or a
`RemoteEvaluator` with `judge_url`), so many sessions judge on one worker pool. An action is the
agent's message as `KernelEnv` takes it (an optional `#! compile|check|eval|submit` line and a
candidate); the observation is the environment's text, with the verdict and the reward `KernelEnv`
gives. OpenEnv's server has no authentication: `serve_openenv` listens on localhost only (reach it
from elsewhere through an SSH tunnel). Client: `KernelEnvClient` (OpenEnv's `EnvClient`).
"""
from __future__ import annotations

import math
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from ..envs.kernel_env import KernelEnv
from .server import LOOPBACK, AppServer

ENV_NAME = "cuda_gym_kernel"


class KernelAction(Action):
    """The agent's message: an optional `#! compile|check|eval|submit` line, then a `ModelNew` source."""

    message: str = Field(..., description="`#! command` line (optional, default eval) and the candidate source")


class KernelObservation(Observation):
    """What `KernelEnv` answers: its text, and the step's facts from its `info`."""

    text: str = Field(default="", description="the task prompt after reset, the feedback after a step")
    task_id: str = ""
    turn: int = 0
    verdict: str = Field(default="", description="the step's ErrorCode (or COMPILED / INVALID_ACTION); '' on reset")
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict, description="KernelEnv's info, the result compacted")


class KernelState(State):
    task_id: str = ""
    turn: int = 0
    done: bool = False


class KernelOpenEnv(Environment[KernelAction, KernelObservation, KernelState]):
    """One session's `KernelEnv`. `env_kwargs` are KernelEnv's (suite, levels, backend, reward, ...)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, evaluator: Any = None, **env_kwargs: Any):
        super().__init__()
        self.env = KernelEnv(evaluator=evaluator, **env_kwargs)
        self._state = KernelState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              **kwargs: Any) -> KernelObservation:
        """A new episode: `task_id` picks the task (else one drawn with `seed`)."""
        text, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        self._state = KernelState(episode_id=episode_id, task_id=info["task_id"], turn=0)
        return KernelObservation(text=text, task_id=info["task_id"], info=_plain(info))

    def step(self, action: KernelAction, timeout_s: float | None = None, **kwargs: Any) -> KernelObservation:
        text, reward, terminated, truncated, info = self.env.step(action.message)
        self._state.turn, self._state.step_count = info["turn"], self._state.step_count + 1
        self._state.done = terminated or truncated
        compact = {key: value for key, value in info.items() if key != "result"}
        result = info.get("result") or {}
        compact["result"] = {key: result.get(key) for key in ("error_code", "message", "compiled", "correct",
                                                              "speedup_vs_eager", "speedup_vs_compile")}
        return KernelObservation(text=text, task_id=info["task_id"], turn=info["turn"], verdict=info["verdict"],
                                 reward=reward, done=terminated or truncated, truncated=truncated,
                                 info=_plain(compact))

    @property
    def state(self) -> KernelState:
        return self._state

    def close(self) -> None:
        self.env.close()


def _plain(value: Any) -> Any:
    """JSON-safe: tuples as lists, non-finite floats as None (OpenEnv's JSON is strict)."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def make_openenv_app(evaluator: Any = None, *, max_sessions: int = 8, **env_kwargs: Any) -> Any:
    """OpenEnv's FastAPI app serving `KernelOpenEnv(evaluator, **env_kwargs)`, one per session."""
    return create_app(lambda: KernelOpenEnv(evaluator, **env_kwargs), KernelAction, KernelObservation,
                      env_name=ENV_NAME, max_concurrent_envs=max_sessions)


def serve_openenv(evaluator: Any = None, *, port: int = 8000, max_sessions: int = 8, **env_kwargs: Any) -> AppServer:
    """An `AppServer` (not started) for `make_openenv_app`, on localhost only."""
    return AppServer(make_openenv_app(evaluator, max_sessions=max_sessions, **env_kwargs), host=LOOPBACK, port=port)


class KernelEnvClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """OpenEnv client of `KernelOpenEnv` (async; `.sync()` for a blocking one)."""

    def _step_payload(self, action: KernelAction) -> dict[str, Any]:
        return {"message": action.message}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        observation = KernelObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> KernelState:
        return KernelState(**payload)
