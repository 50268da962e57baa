"""verifiers adapter (verifiers >= 0.4, its `verifiers.v1` stack; extra `verifiers`): cuda_gym's text
environment as an Environments-Hub environment.

The Hub package is the top-level module `cuda_gym_kernel` (taskset id `cuda_gym_kernel`), which
re-exports this module: verifiers' loader imports a taskset id as a module and takes the `Taskset`
and `Env` subclasses it exports through `__all__`. So `vf.load_environment(config)` with
`config.taskset.id == "cuda_gym_kernel"` builds `KernelVerifiersEnv`; `load_environment(**fields)`
here builds that config and calls it.

- `KernelTaskset` yields one `KernelTask` per task of a suite (`suite`, `levels`, `task_ids`), its
  `task_id` on the task data. The task has no prompt: the environment opens the exchange.
- `KernelVerifiersEnv.run` plays one `KernelEnv` episode (`reward_mode="final"`) with the agent seat
  as the policy, as verl's loop does: the first user turn is the task prompt (reference program,
  hardware, rules, candidate format), the workflow guide and the ReAct agent's start message; each
  reply's command line and code block (`cuda_gym_agents.react.parse_reply` / `action_for`) is one
  environment step; the environment's feedback is the next user turn; until `#! submit`, the
  environment's turn budget (`max_turns`), or the agent stopping (an empty reply, its own limits).
- The reward (`kernel_reward`, weight 1) is the episode reward `KernelEnv` gives with
  `reward_mode="final"`: the best reward among the episode's evaluated candidates (CUDA Agent's
  milestone by default), computed by our judge; an episode the agent left early gets what
  `KernelEnv` gives it at that point. Metrics: `kernel_steps`, `kernel_correct` (1 when a judged
  step was correct).
- The judge: a local `Evaluator` (`backend`), or `cuda-gym serve` through `judge_url` (a
  `RemoteEvaluator`; token from `$CUDA_GYM_JUDGE_TOKEN`). One per environment, shared by its
  episodes, created on first use and closed when the environment stops serving; or set
  `env.evaluator` (or `load_environment(evaluator=...)`) to one of your own, which is never closed here.
- The agent seat defaults to verifiers' `null` harness (a tool-less chat loop: the model gets no
  shell) in the `subprocess` runtime: candidates run only in the judge's sandboxed workers.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf

from cuda_gym.envs import KernelEnv
from cuda_gym.tasks import load_suite

from ..react import START_MESSAGE, WORKFLOW_GUIDE, action_for, parse_reply

TASKSET_ID = "cuda_gym_kernel"
REWARD_NAME = "kernel_reward"


class KernelTasksetConfig(vf.TasksetConfig):
    """Which tasks load, how they are judged and rewarded (`--env.taskset.*`)."""

    suite: str = "builtin"
    levels: list[int] | None = None
    task_ids: list[str] = []
    """Only these task ids (in this order); empty: every task of `suite` / `levels`."""
    data_path: str | None = None
    """KernelBench or Ops-6K data, for those suites."""
    backend: str = "auto"
    judge_url: str | None = None
    """A `cuda-gym serve` URL: judge there instead of in a local Evaluator."""
    reward: str = "milestone"
    max_turns: int = 4
    """The `KernelEnv` turn budget of one episode."""
    language: str = "cuda"


class KernelTaskData(vf.TaskData):
    task_id: str
    level: int


class KernelTask(vf.Task[KernelTaskData]):
    pass


class KernelTaskset(vf.Taskset[KernelTask, KernelTasksetConfig]):
    def load(self) -> Iterator[KernelTask]:
        config = self.config
        kwargs: dict[str, Any] = {"data_path": config.data_path} if config.data_path else {}
        tasks = load_suite(config.suite, levels=tuple(config.levels) if config.levels else None, **kwargs)
        if config.task_ids:
            by_id = {task.id: task for task in tasks}
            missing = [task_id for task_id in config.task_ids if task_id not in by_id]
            if missing:
                raise ValueError(f"task ids not in suite {config.suite!r}: {missing}")
            tasks = [by_id[task_id] for task_id in config.task_ids]
        for task in tasks:
            yield KernelTask(KernelTaskData(id=task.id, name=task.id, task_id=task.id, level=task.level, prompt=None),
                             config.task)


class KernelVerifiersEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime=vf.SubprocessConfig())
    """The policy's seat: verifiers' tool-less `null` chat harness, run as a local subprocess."""


class KernelVerifiersEnv(vf.Env[KernelVerifiersEnvConfig]):
    """One `KernelEnv` episode per rollout, the agent seat as its policy (see the module docstring)."""

    def __init__(self, config: KernelVerifiersEnvConfig) -> None:
        super().__init__(config)
        self.evaluator: Any = None
        self._owns_evaluator = False
        self._lock = threading.Lock()

    def _evaluator(self) -> Any:
        with self._lock:
            if self.evaluator is None:
                config = self.taskset.config
                if config.judge_url:
                    from cuda_gym.eval.remote import RemoteEvaluator

                    self.evaluator = RemoteEvaluator(config.judge_url)
                else:
                    from cuda_gym.eval import Evaluator

                    self.evaluator = Evaluator(config.backend)
                self._owns_evaluator = True
            return self.evaluator

    def _kernel_env(self) -> KernelEnv:
        config = self.taskset.config
        return KernelEnv(suite=config.suite, levels=config.levels, backend=config.backend, reward=config.reward,
                         reward_mode="final", max_turns=config.max_turns, evaluator=self._evaluator(),
                         data_path=config.data_path, language=config.language)

    async def run(self, task: KernelTask, agents: vf.Agents) -> None:
        env = await asyncio.to_thread(self._kernel_env)
        try:
            prompt, _ = await asyncio.to_thread(env.reset, options={"task_id": task.data.task_id})
            opening = f"{prompt.rstrip()}\n\n{WORKFLOW_GUIDE}\n\n{START_MESSAGE}"
            reward, done, steps, correct = None, False, 0, False
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn(opening)
                while not segment.terminated:
                    reply = segment.last_reply
                    if not reply:
                        interaction.trace.stop("empty_reply")
                        break
                    action = action_for(parse_reply(reply), reply)
                    feedback, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
                    steps += 1
                    correct = correct or bool(info["correct"])
                    done = terminated or truncated
                    if done:
                        interaction.trace.stop("submitted" if terminated else "turn_budget")
                        break
                    segment = await interaction.turn(feedback)
            if not done:  # the agent stopped first: the reward KernelEnv gives the episode as it stands
                reward = env.episode_reward()
            trace = interaction.trace
            trace.record_reward(REWARD_NAME, float(reward))
            trace.record_metric("kernel_steps", steps)
            trace.record_metric("kernel_correct", float(correct))
        finally:
            env.close()

    async def stop(self) -> None:
        with self._lock:
            if self._owns_evaluator and self.evaluator is not None:
                self.evaluator.close()
                self.evaluator = None
                self._owns_evaluator = False


def load_environment(evaluator: Any = None, agent: dict[str, Any] | None = None, **taskset: Any) -> KernelVerifiersEnv:
    """The environment, as verifiers loads it: `taskset` are `KernelTasksetConfig` fields, `agent`
    overrides the agent seat's config (`vf.AgentConfig` fields), `evaluator` an Evaluator to judge with."""
    data: dict[str, Any] = {"taskset": {"id": TASKSET_ID, **taskset}}
    if agent is not None:
        data["agent"] = agent
    env = vf.load_environment(vf.resolve_env_config(data))
    if evaluator is not None:
        env.evaluator = evaluator
    return env


__all__ = ["KernelTask", "KernelTaskData", "KernelTaskset", "KernelTasksetConfig", "KernelVerifiersEnv",
           "KernelVerifiersEnvConfig", "load_environment"]
