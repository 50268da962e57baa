"""TRL adapter: train on cuda_gym tasks with `trl.GRPOTrainer` (TRL >= 1.0, transformers >= 5.2).

Multi-turn, with tools (`environment_factory`)::

    factory = KernelEnvironmentFactory(KernelToolConfig(backend="cuda"))
    trainer = GRPOTrainer(model=..., args=GRPOConfig(...), train_dataset=Dataset.from_list(environment_rows(tasks)),
                          environment_factory=factory)

TRL creates one `KernelEnvironment` per concurrent rollout (all share the factory's `Evaluator`),
calls `reset(**row)` with the dataset row (its `task_id` picks the task; the returned task prompt
is appended to the row's user message), exposes every public method but `reset` / `get_reward` as
a tool (here only `submit_kernel`), and calls `get_reward()` once the rollout ends. Each
`submit_kernel` call is one `#! eval` step of a `KernelEnv` episode (build, correctness on every
draw, timing against the baselines); the rollout's reward is the best step reward (CUDA Agent's
best-in-trajectory milestone by default), or the failure reward when nothing was submitted.

Single-turn (`reward_funcs`)::

    reward = KernelReward(evaluator)
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=Dataset.from_list(
        single_turn_rows(tasks, env)), ...)

`KernelReward(prompts, completions, task_id, **kwargs)` judges every completion's code block on the
row's task (all at once, through `Evaluator.submit`) and returns one reward per completion.

Interface facts this follows (TRL 1.16 `GRPOTrainer`): tool methods need type hints and a
Google-style docstring (transformers builds the JSON schema from them); `reset` may return a
string, appended to the last user message; `get_reward` takes no argument; reward functions are
called as `f(prompts=..., completions=..., completion_ids=..., **dataset columns, trainer_state=...,
log_extra=..., log_metric=..., environments=...)` and return one float (or None) per completion.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from cuda_gym.envs import KernelEnv
from cuda_gym.eval import EvalConfig, Evaluator
from cuda_gym.eval.result import ErrorCode, EvalResult
from cuda_gym.eval.reward import get_reward
from cuda_gym.tasks.task import Task

from ..react import parse_reply

TOOL_INSTRUCTION = (
    "Use the submit_kernel tool to have a candidate built, checked for correctness and timed: pass it the "
    "whole Python file of your ModelNew (no '#!' command line is needed). Each call is one evaluation "
    "and returns the verdict; you have {max_submissions} calls, and your reward is the best result among "
    "them. The task follows.\n\n")
SINGLE_TURN_INSTRUCTION = (
    "\n\n## Answer format for this training run\nReply with one ```python code block holding the whole "
    "candidate file (class ModelNew and its kernels). It is evaluated once, as with '#! eval'; no command "
    "line is needed.")


@dataclass(frozen=True)
class KernelToolConfig:
    """Settings of the TRL environments. Defaults: the recommended evaluation, CUDA Agent's
    milestone reward, up to 4 submissions per rollout.

    suite / levels / data_path: the tasks a row's `task_id` may name (any task id also resolves
        through its suite). backend: "auto", "cuda" or "cpu". reward: a reward name
        ("milestone", "log_speedup") or a callable `(EvalResult, history) -> float`.
    eval_config: None means the evaluator's own config.
    """

    suite: str = "builtin"
    levels: tuple[int, ...] | None = None
    data_path: str | None = None
    backend: str = "auto"
    reward: str | Callable[..., float] = "milestone"
    max_submissions: int = 4
    eval_config: EvalConfig | None = None
    cache_dir: str | None = None


class KernelEnvironment:
    """One TRL rollout's environment: a `KernelEnv` episode driven by `submit_kernel` calls.

    Only `reset`, `submit_kernel` and `get_reward` are public methods, because TRL turns every
    other public method into a tool. Create instances through `KernelEnvironmentFactory`.
    """

    def __init__(self, config: KernelToolConfig, evaluator: Any):
        self._config = config
        self._env = KernelEnv(suite=config.suite, levels=config.levels, backend=config.backend,
                              reward=config.reward, reward_mode="per_step", max_turns=config.max_submissions,
                              eval_config=config.eval_config, evaluator=evaluator, data_path=config.data_path)
        self._rewards: list[float] = []
        self._done = False
        self._started = False

    @property
    def task_id(self) -> str | None:
        """The current rollout's task id (None before the first reset)."""
        return self._env.task.id if self._env.task is not None else None

    @property
    def history(self) -> tuple:
        """(command, EvalResult) of each submission of the current rollout."""
        return self._env.history

    @property
    def rewards(self) -> list[float]:
        """The reward of each submission of the current rollout, in order."""
        return list(self._rewards)

    def reset(self, **row: Any) -> str:
        """Start a rollout on `row["task_id"]` and return the task prompt (TRL appends it to the
        row's user message). Other row fields are ignored."""
        task_id = row.get("task_id")
        if not task_id:
            raise ValueError("the dataset row has no 'task_id'; build the rows with "
                             "cuda_gym_agents.adapters.trl.environment_rows(tasks)")
        prompt, _ = self._env.reset(options={"task_id": str(task_id)})
        self._rewards = []
        self._done = False
        self._started = True
        return prompt

    def submit_kernel(self, source: str) -> str:
        """Build, check and time a candidate implementation of the task.

        Args:
            source: The complete Python source of the candidate file: its imports, its kernels (for
                example loaded with cuda_gym.native.load_kernels) and class ModelNew.

        Returns:
            The verdict: whether it built, whether its outputs matched the reference on every input
            draw, its time and speedups against PyTorch eager and torch.compile, and the errors to fix.
        """
        if not self._started:
            return "No task is loaded yet: the environment was not reset."
        if self._done:
            return (f"No submissions left: all {self._config.max_submissions} were used. Your best result "
                    "counts; stop calling submit_kernel.")
        if not isinstance(source, str):
            source = "" if source is None else str(source)
        observation, reward, terminated, truncated, _ = self._env.step("#! eval\n" + source)
        self._rewards.append(float(reward))
        self._done = terminated or truncated
        return observation

    def get_reward(self) -> float:
        """The rollout's reward: the best submission's reward, or the reward of a failure when
        nothing was submitted (-1 with the milestone reward)."""
        if self._rewards:
            return max(self._rewards)
        task_id = self.task_id or "<no task>"
        nothing = EvalResult(task_id=task_id, backend=self._env.backend if self._started else "",
                             error_code=ErrorCode.INVALID_ACTION, message="no candidate was submitted")
        return float(self._env.reward_fn(nothing, []))


class KernelEnvironmentFactory:
    """TRL's `environment_factory`: each call returns a new `KernelEnvironment`; all of them share
    one `Evaluator` (the one passed in, else one created on first use and closed by `close()`)."""

    def __init__(self, config: KernelToolConfig | None = None, evaluator: Any = None):
        self.config = config or KernelToolConfig()
        self._evaluator = evaluator
        self._owns_evaluator = evaluator is None
        self._lock = threading.Lock()
        self.environments: list[KernelEnvironment] = []

    @property
    def evaluator(self) -> Any:
        with self._lock:
            if self._evaluator is None:
                self._evaluator = Evaluator(self.config.backend, self.config.eval_config or EvalConfig(),
                                            cache_dir=self.config.cache_dir)
            return self._evaluator

    def __call__(self) -> KernelEnvironment:
        environment = KernelEnvironment(self.config, self.evaluator)
        self.environments.append(environment)
        return environment

    def close(self) -> None:
        """Close the evaluator if this factory created it."""
        with self._lock:
            if self._owns_evaluator and self._evaluator is not None:
                self._evaluator.close()
                self._evaluator = None


class OpenEnvKernelEnvironment:
    """One TRL rollout's environment, played through a `cuda-gym serve --openenv` server (OpenEnv's
    WebSocket protocol, `cuda_gym.serve.openenv_env.KernelEnvClient`; extra `openenv`).

    The same tool interface as `KernelEnvironment` (`reset`, `submit_kernel`, `get_reward`): each
    `submit_kernel` call is one `#! eval` step of the server's `KernelEnv` episode, and the rollout's
    reward is the best step reward the server returned. The server owns the task set, the judge, the
    reward function and the turn budget (`--max-turns`, its `KernelEnv`'s `max_turns`); a rollout
    without a submission gets `no_submission_reward` (the milestone reward's failure, -1, by
    default), since the server's reward function is not known here. One WebSocket session per
    instance, opened on the first reset; the factory's `close()` ends it (no public `close` here:
    TRL would make it a tool).
    """

    def __init__(self, base_url: str, no_submission_reward: float = -1.0, message_timeout_s: float = 3600.0):
        self._base_url = base_url
        self._no_submission_reward = float(no_submission_reward)
        self._message_timeout_s = float(message_timeout_s)
        self._client: Any = None
        self._steps: list[tuple[str, float]] = []
        self._task_id: str | None = None
        self._done = False

    @property
    def task_id(self) -> str | None:
        """The current rollout's task id, as the server reported it (None before the first reset)."""
        return self._task_id

    @property
    def steps(self) -> list[tuple[str, float]]:
        """(verdict, reward) of each submission of the current rollout, as the server returned them."""
        return list(self._steps)

    def reset(self, **row: Any) -> str:
        """Start a rollout on `row["task_id"]` on the server and return its task prompt."""
        task_id = row.get("task_id")
        if not task_id:
            raise ValueError("the dataset row has no 'task_id'; build the rows with "
                             "cuda_gym_agents.adapters.trl.environment_rows(tasks)")
        if self._client is None:
            from cuda_gym.serve.openenv_env import KernelEnvClient

            self._client = KernelEnvClient(base_url=self._base_url,
                                           message_timeout_s=self._message_timeout_s).sync().connect()
        result = self._client.reset(task_id=str(task_id))
        self._task_id = result.observation.task_id
        self._steps = []
        self._done = False
        return result.observation.text

    def submit_kernel(self, source: str) -> str:
        """Build, check and time a candidate implementation of the task.

        Args:
            source: The complete Python source of the candidate file: its imports, its kernels (for
                example loaded with cuda_gym.native.load_kernels) and class ModelNew.

        Returns:
            The verdict: whether it built, whether its outputs matched the reference on every input
            draw, its time and speedups against PyTorch eager and torch.compile, and the errors to fix.
        """
        if self._task_id is None:
            return "No task is loaded yet: the environment was not reset."
        if self._done:
            return "No submissions left: the episode is over. Your best result counts; stop calling submit_kernel."
        from cuda_gym.serve.openenv_env import KernelAction

        if not isinstance(source, str):
            source = "" if source is None else str(source)
        result = self._client.step(KernelAction(message="#! eval\n" + source))
        self._steps.append((result.observation.verdict, float(result.reward)))
        self._done = bool(result.done)
        return result.observation.text

    def get_reward(self) -> float:
        """The rollout's reward: the best reward the server gave a submission, else `no_submission_reward`."""
        if self._steps:
            return max(reward for _, reward in self._steps)
        return self._no_submission_reward

    def _close(self) -> None:
        """End this instance's session with the server."""
        if self._client is not None:
            self._client.close()
            self._client = None


class OpenEnvKernelEnvironmentFactory:
    """TRL's `environment_factory` for a `cuda-gym serve --openenv` server at `base_url`: each call
    returns a new `OpenEnvKernelEnvironment` (its own WebSocket session); `close()` ends them all."""

    def __init__(self, base_url: str, no_submission_reward: float = -1.0, message_timeout_s: float = 3600.0):
        self.base_url = base_url
        self.no_submission_reward = no_submission_reward
        self.message_timeout_s = message_timeout_s
        self.environments: list[OpenEnvKernelEnvironment] = []

    def __call__(self) -> OpenEnvKernelEnvironment:
        environment = OpenEnvKernelEnvironment(self.base_url, self.no_submission_reward, self.message_timeout_s)
        self.environments.append(environment)
        return environment

    def close(self) -> None:
        for environment in self.environments:
            environment._close()


def environment_rows(tasks: Iterable[Task], max_submissions: int = KernelToolConfig.max_submissions
                     ) -> list[dict[str, Any]]:
    """Dataset rows for `environment_factory` training (`datasets.Dataset.from_list(rows)`): a
    conversational prompt with the tool instruction (the environment's `reset` appends the task
    prompt), plus `task_id` and `level` columns."""
    instruction = TOOL_INSTRUCTION.format(max_submissions=max_submissions)
    return [{"prompt": [{"role": "user", "content": instruction}], "task_id": task.id, "level": task.level}
            for task in tasks]


def single_turn_rows(tasks: Iterable[Task], env: KernelEnv) -> list[dict[str, Any]]:
    """Dataset rows for single-turn GRPO with `KernelReward`: the task prompt as `env` writes it
    (its backend, hardware and rules) plus the one-reply answer format, and `task_id` / `level`."""
    rows = []
    for task in tasks:
        prompt, _ = env.reset(options={"task": task})
        rows.append({"prompt": [{"role": "user", "content": prompt + SINGLE_TURN_INSTRUCTION}],
                     "task_id": task.id, "level": task.level})
    return rows


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string (standard format) or a list of messages
    (conversational: the assistant messages' contents, joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        parts = [m.get("content") for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        return "\n".join(p if isinstance(p, str) else str(p) for p in parts if p)
    return str(completion)


class KernelReward:
    """A single-turn GRPO reward function: each completion's candidate (its last ```python block
    defining ModelNew, else its whole text) is evaluated on its row's task, and the reward is
    `reward(result, [])` (milestone by default). Logs a `verdict` column and a `correct_rate`
    metric when the trainer offers `log_extra` / `log_metric`."""

    __name__ = "cuda_gym_kernel_reward"

    def __init__(self, evaluator: Any, reward: str | Callable[..., float] = "milestone",
                 eval_config: EvalConfig | None = None, data_path: str | None = None):
        self.evaluator = evaluator
        self.reward_fn = get_reward(reward)
        self.eval_config = eval_config
        self.data_path = data_path
        self._tasks: dict[str, Task] = {}

    def _task(self, task_id: str) -> Task:
        if task_id not in self._tasks:
            from cuda_gym.tasks import get_task

            suite = task_id.split("/", 1)[0]
            kwargs = {"data_path": self.data_path} if self.data_path and suite != "builtin" else {}
            self._tasks[task_id] = get_task(task_id, **kwargs)
        return self._tasks[task_id]

    def __call__(self, prompts: list[Any], completions: list[Any], task_id: list[str] | None = None,
                 **kwargs: Any) -> list[float]:
        if task_id is None:
            raise ValueError("KernelReward needs a 'task_id' dataset column; build the rows with "
                             "cuda_gym_agents.adapters.trl.single_turn_rows(tasks, env)")
        futures = []
        for completion, tid in zip(completions, task_id, strict=True):
            text = completion_text(completion)
            candidate = parse_reply(text).candidate or text
            futures.append(self.evaluator.submit(self._task(tid), candidate, config=self.eval_config))
        results = [future.result() for future in futures]
        if callable(kwargs.get("log_extra")):
            kwargs["log_extra"]("verdict", [r.error_code.value for r in results])
        if callable(kwargs.get("log_metric")) and results:
            kwargs["log_metric"]("correct_rate", sum(r.correct for r in results) / len(results))
        return [float(self.reward_fn(r, [])) for r in results]
