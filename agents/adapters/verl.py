"""verl adapter: an agent loop that plays one cuda_gym episode per sample (verl >= 0.5's AgentLoop).

verl's agent-loop interface (verl/experimental/agent_loop/agent_loop.py, read at 0.9.1):
`AgentLoopBase.__init__(trainer_config, server_manager, tokenizer, processor, dataset_cls,
data_config, **kwargs)` (extra keys of an agent-loop config entry arrive as keyword arguments),
`async run(sampling_params, **kwargs) -> AgentLoopOutput` where kwargs are the sample's
non-tensor dataset fields (`raw_prompt`, `extra_info`, ...), `server_manager.generate(request_id=,
prompt_ids=, sampling_params=)` returning `TokenOutput(token_ids, log_probs)`, and
`AgentLoopOutput(prompt_ids, response_ids, response_mask, response_logprobs, reward_score,
num_turns, metrics, extra_fields)`; `register(name)` files a class under a name that the dataset's
`agent_name` column selects. When `reward_score` is set, verl uses it instead of a reward model.

What runs here:

- `play_episode(...)`: the loop, independent of verl. Turn by turn: generate from the prompt ids
  plus the response so far; decode the reply; step the `KernelEnv` with the reply's command and
  code block (`cuda_gym_agents.react.parse_reply` / `action_for`, so the model writes replies as the ReAct
  agent does); append the environment's feedback as a user message whose template tokens are
  masked out (mask 0, logprob 0); stop at `#! submit`, the turn budget or `response_length`.
  The generated tokens are kept as the server returned them, never re-tokenised. The episode's
  reward is the best step reward (CUDA Agent's best-in-trajectory milestone), or the failure
  reward when no step was judged.
- `CudaGymAgentLoop` (module attribute, built on first access, which imports verl): the
  `AgentLoopBase` subclass registered as "cuda_gym_agent", whose `run` calls `play_episode`
  with `server_manager.generate` and returns an `AgentLoopOutput`. All loops of a worker process
  share one `Evaluator` (created on first use, closed at exit).
- `verl_rows(tasks, env)`: dataset rows (save them as parquet for verl's RLHFDataset).

Agent-loop config file (`actor_rollout_ref.rollout.agent.agent_loop_config_path`)::

    - name: cuda_gym_agent
      _target_: cuda_gym_agents.adapters.verl.CudaGymAgentLoop
      cuda_gym: {backend: cuda, max_turns: 4}

See docs/adapters.md for what was and was not run against a real verl.
"""
from __future__ import annotations

import asyncio
import atexit
import threading
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Awaitable, Callable, Iterable, Sequence

from cuda_gym.envs import KernelEnv
from cuda_gym.eval import EvalConfig
from cuda_gym.eval.result import ErrorCode, EvalResult
from cuda_gym.tasks.task import Task

from ..react import START_MESSAGE, ReactPolicy, action_for, parse_reply

AGENT_NAME = "cuda_gym_agent"
DATA_SOURCE = "cuda_gym"

# (prompt_ids, sampling_params) -> (generated token ids, their logprobs or None)
GenerateFn = Callable[[list[int], dict[str, Any]], Awaitable[tuple[list[int], list[float] | None]]]


@dataclass(frozen=True)
class VerlLoopConfig:
    """Settings of the agent loop (the `cuda_gym:` mapping of its config entry). Defaults: the
    recommended evaluation, the milestone reward, 4 turns."""

    suite: str = "builtin"
    levels: tuple[int, ...] | None = None
    data_path: str | None = None
    backend: str = "auto"
    reward: str = "milestone"
    max_turns: int = 4
    eval_config: EvalConfig | None = None
    cache_dir: str | None = None

    @classmethod
    def from_mapping(cls, values: Any) -> "VerlLoopConfig":
        """From a dict or OmegaConf mapping; unknown keys raise a ValueError that lists the known ones."""
        if values is None:
            return cls()
        if hasattr(values, "items"):
            values = {key: value for key, value in values.items()}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown cuda_gym agent-loop settings {unknown}; known: {sorted(known)}")
        if values.get("levels") is not None:
            values["levels"] = tuple(int(level) for level in values["levels"])
        if isinstance(values.get("eval_config"), dict) or hasattr(values.get("eval_config"), "items"):
            values["eval_config"] = EvalConfig(**dict(values["eval_config"].items()))
        return cls(**values)


@dataclass
class EpisodeOutput:
    """What `play_episode` returns: the fields of verl's AgentLoopOutput, plus the step records."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward_score: float
    num_turns: int
    extra_fields: dict[str, Any] = field(default_factory=dict)


def _template_ids(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool,
                  template_kwargs: dict[str, Any]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True,
                                        **template_kwargs)
    if hasattr(ids, "keys"):  # transformers >= 5 may return a BatchEncoding
        ids = ids["input_ids"]
    return list(ids)


def feedback_ids(tokenizer: Any, feedback: str, template_kwargs: dict[str, Any] | None = None) -> list[int]:
    """The tokens that add a user message with `feedback` and open the next assistant turn: the
    chat template of [user "x", user feedback] (+ generation prompt) minus that of [user "x"]."""
    template_kwargs = template_kwargs or {}
    base = [{"role": "user", "content": "x"}]
    before = _template_ids(tokenizer, base, False, template_kwargs)
    after = _template_ids(tokenizer, base + [{"role": "user", "content": feedback}], True, template_kwargs)
    if after[:len(before)] != before:
        raise ValueError("the chat template does not render a conversation as a prefix of its continuation; "
                         "cuda_gym's verl loop cannot append feedback turns with this template")
    return after[len(before):]


async def play_episode(env: KernelEnv, task_id: str, messages: Sequence[dict[str, str]], generate: GenerateFn,
                       tokenizer: Any, sampling_params: dict[str, Any], response_length: int,
                       template_kwargs: dict[str, Any] | None = None) -> EpisodeOutput:
    """Play one episode of `task_id` (see the module docstring). `messages`: the sample's chat
    prompt (from `verl_rows`). Never raises for what the model writes; an environment error ends
    the episode and is recorded in `extra_fields["error"]`."""
    template_kwargs = template_kwargs or {}
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: env.reset(options={"task_id": task_id}))
    prompt_ids = _template_ids(tokenizer, list(messages), True, template_kwargs)
    response_ids: list[int] = []
    response_mask: list[int] = []
    logprobs: list[float] = []
    have_logprobs = True
    rewards: list[float] = []
    steps: list[dict[str, Any]] = []
    error = ""
    turns = 0
    while len(response_ids) < response_length:
        token_ids, token_logprobs = await generate(prompt_ids + response_ids, sampling_params)
        token_ids = list(token_ids)
        turns += 1
        response_ids += token_ids
        response_mask += [1] * len(token_ids)
        if token_logprobs is None:
            have_logprobs = False
        logprobs += list(token_logprobs) if token_logprobs is not None else [0.0] * len(token_ids)
        if len(response_ids) >= response_length:
            break  # the reply was cut: judging half a candidate would only teach the cut
        reply = tokenizer.decode(token_ids, skip_special_tokens=True)
        action = action_for(parse_reply(reply), reply)
        try:
            observation, reward, terminated, truncated, info = await loop.run_in_executor(None, env.step, action)
        except Exception as exc:  # noqa: BLE001 - an evaluator failure ends the episode, it must not kill the batch
            error = f"{type(exc).__name__}: {exc}"
            break
        rewards.append(float(reward))
        steps.append({"turn": info["turn"], "command": info["command"], "verdict": info["verdict"],
                      "reward": float(reward), "speedup_vs_eager": info["result"].get("speedup_vs_eager"),
                      "speedup_vs_compile": info["result"].get("speedup_vs_compile")})
        if terminated or truncated:
            break
        added = feedback_ids(tokenizer, observation, template_kwargs)
        response_ids += added
        response_mask += [0] * len(added)
        logprobs += [0.0] * len(added)
    if rewards:
        reward_score = max(rewards)
    else:
        nothing = EvalResult(task_id=task_id, backend=env.backend, error_code=ErrorCode.INVALID_ACTION,
                             message="no candidate was judged in this episode")
        reward_score = float(env.reward_fn(nothing, []))
    extra = {"task_id": task_id, "steps": steps, "turn_scores": rewards, "tool_rewards": []}
    if error:
        extra["error"] = error
    return EpisodeOutput(prompt_ids=prompt_ids, response_ids=response_ids[:response_length],
                         response_mask=response_mask[:response_length],
                         response_logprobs=logprobs[:response_length] if have_logprobs else None,
                         reward_score=reward_score, num_turns=1 + 2 * turns, extra_fields=extra)


def task_id_of(sample: dict[str, Any]) -> str:
    """The task id of a verl sample: `extra_info["task_id"]` (as `verl_rows` writes it)."""
    extra = sample.get("extra_info") or {}
    task_id = extra.get("task_id") if hasattr(extra, "get") else None
    if not task_id:
        raise ValueError("the sample has no extra_info.task_id; build the dataset with "
                         "cuda_gym_agents.adapters.verl.verl_rows(tasks, env)")
    return str(task_id)


def verl_rows(tasks: Iterable[Task], env: KernelEnv) -> list[dict[str, Any]]:
    """Rows for verl's RLHFDataset (write them with pandas / pyarrow to parquet): the ReAct
    agent's conversation start (system: the task prompt and workflow guide; user: the first
    request), `agent_name` = "cuda_gym_agent", and `extra_info.task_id`."""
    policy = ReactPolicy()
    rows = []
    for index, task in enumerate(tasks):
        prompt, _ = env.reset(options={"task": task})
        rows.append({
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "system", "content": policy.system_prompt(prompt)},
                       {"role": "user", "content": START_MESSAGE}],
            "ability": "kernel_optimization",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"task_id": task.id, "level": task.level, "index": index},
            "agent_name": AGENT_NAME,
        })
    return rows


# ------------------------------------------------------------------------ the verl agent loop

_EVALUATORS: dict[tuple, Any] = {}
_EVALUATORS_LOCK = threading.Lock()


def shared_evaluator(config: VerlLoopConfig) -> Any:
    """One Evaluator per (backend, eval config, cache dir) in this process, closed at exit."""
    from cuda_gym.eval import Evaluator

    key = (config.backend, config.eval_config, config.cache_dir)
    with _EVALUATORS_LOCK:
        if key not in _EVALUATORS:
            evaluator = Evaluator(config.backend, config.eval_config or EvalConfig(), cache_dir=config.cache_dir)
            atexit.register(evaluator.close)
            _EVALUATORS[key] = evaluator
        return _EVALUATORS[key]


def make_env(config: VerlLoopConfig, evaluator: Any) -> KernelEnv:
    """The episode environment of one sample (final-mode rewards are not used: the loop takes the
    best per-step reward itself)."""
    return KernelEnv(suite=config.suite, levels=config.levels, backend=config.backend, reward=config.reward,
                     reward_mode="per_step", max_turns=config.max_turns, eval_config=config.eval_config,
                     evaluator=evaluator, data_path=config.data_path)


def _build_agent_loop_class(base: type, output_cls: type, register: Callable[[str], Callable[[type], type]]) -> type:
    """The AgentLoopBase subclass, built over verl's classes (or stand-ins with their interface)."""

    class CudaGymAgentLoop(base):
        """Plays one cuda_gym episode per sample (see agents/adapters/verl.py)."""

        def __init__(self, *args: Any, cuda_gym: Any = None, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.cuda_gym_config = VerlLoopConfig.from_mapping(cuda_gym)

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
            config = self.cuda_gym_config
            env = make_env(config, shared_evaluator(config))
            request_id = uuid.uuid4().hex  # one sticky session per episode: the server can reuse its prefix cache

            async def generate(prompt_ids: list[int], params: dict[str, Any]):
                output = await self.server_manager.generate(request_id=request_id, prompt_ids=prompt_ids,
                                                            sampling_params=params)
                return output.token_ids, output.log_probs

            rollout = self.config.actor_rollout_ref.rollout
            template_kwargs = dict(getattr(self, "apply_chat_template_kwargs", None) or {})
            try:
                episode = await play_episode(env, task_id_of(kwargs), list(kwargs["raw_prompt"]), generate,
                                             self.tokenizer, sampling_params, int(rollout.response_length),
                                             template_kwargs)
            finally:
                env.close()  # the shared evaluator stays open
            return output_cls(prompt_ids=episode.prompt_ids, response_ids=episode.response_ids,
                              response_mask=episode.response_mask, response_logprobs=episode.response_logprobs,
                              reward_score=episode.reward_score, num_turns=episode.num_turns, metrics={},
                              extra_fields=episode.extra_fields)

    CudaGymAgentLoop.__qualname__ = "CudaGymAgentLoop"  # verl's register files module + qualname for hydra
    CudaGymAgentLoop.__module__ = __name__
    return register(AGENT_NAME)(CudaGymAgentLoop)


def __getattr__(name: str) -> Any:
    if name == "CudaGymAgentLoop":
        try:
            from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
        except ImportError as exc:
            raise ImportError(f"cuda_gym_agents.adapters.verl.CudaGymAgentLoop needs verl (pip install verl): {exc}") from None
        cls = _build_agent_loop_class(AgentLoopBase, AgentLoopOutput, register)
        globals()["CudaGymAgentLoop"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
