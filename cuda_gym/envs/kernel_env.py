"""`KernelEnv`: a multi-turn Gymnasium environment in which an agent writes fast native kernels.

One episode = one task. `reset()` returns the task prompt (text); every `step(action)` takes the
agent's message (an optional `#! <command>` line plus a candidate `ModelNew` source), judges it
with an `Evaluator` (in worker processes; this process never touches CUDA) and returns feedback
text. See docs/environment.md.
"""
from __future__ import annotations

import copy
import os
import platform
import re
from typing import Any, Callable, Iterable, Sequence

import gymnasium as gym
from gymnasium import spaces

from ..eval.candidate import LANGUAGES, Candidate, InvalidCandidate, parse_candidate
from ..eval.config import EvalConfig
from ..eval.result import ErrorCode, EvalResult
from ..eval.reward import get_reward
from ..tasks.degenerate import without_degenerate
from ..tasks.suites import get_task, load_suite
from ..tasks.task import Task
from . import prompt as prompt_text

REWARD_MODES = ("per_step", "final")
REPEATED_FLAG = "repeated_candidate"  # the episode's earlier verdict on the same source, not judged again
FULL_COMMANDS = ("eval", "submit")  # commands that run the full evaluation (baselines, timing)
_COMMAND_LINE = re.compile(r"^#!\s*([A-Za-z_]+)\b[ \t]*(.*)$")


def compact_result(result: EvalResult | dict[str, Any]) -> dict[str, Any]:
    """`result.to_dict()` (or that dict) without its None-valued fields.

    For gymnasium's vector environments, which stack infos key by key: they cannot stack a field
    that is a dict (a timing) in one sub-environment and None in another, but mark a key that is
    absent in `_key` masks. `EvalResult.from_dict()` rebuilds the exact result.
    """
    data = result.to_dict() if isinstance(result, EvalResult) else result
    return {key: value for key, value in data.items() if value is not None}


class CompactResultInfo(gym.Wrapper):
    """Leaves out `info["result"]`'s None-valued fields (`compact_result`), so that gymnasium's
    vector environments can stack the infos: wrap each sub-environment in it."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if isinstance(info.get("result"), dict):
            info = {**info, "result": compact_result(info["result"])}
        return observation, reward, terminated, truncated, info


def result_from_info(info_result: dict[str, Any]) -> EvalResult:
    """The `EvalResult` behind `info["result"]`."""
    return EvalResult.from_dict(info_result)


def _cpu_description(config: EvalConfig) -> str:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or "unknown CPU"
    threads = config.cpu_threads or os.cpu_count() or 1
    return f"CPU: {model}, {threads} threads available to the candidate"


class KernelEnv(gym.Env):
    """Write a faster native-kernel replacement (`ModelNew`) of a PyTorch program.

    Observation and action: `gymnasium.spaces.Text` (printable ASCII incl. newline and tab).
    Action: `[#! compile|check|eval|submit]` first line (optional, default eval) + candidate source.
    Reward: `reward` (name or callable `(result, history) -> float`) applied per step
    (`reward_mode="per_step"`) or once at the end of the episode (`"final"`).
    Language: `language="cuda"` (the native forms: CUDA C++, C++ on the CPU backend), `"triton"`
    (`@triton.jit` kernels; on the CPU backend judged through Triton's interpreter, where speed
    earns nothing) or `"cupy"` (CUDA C++ sources compiled by CuPy's NVRTC, the cuda backend only):
    the prompt shows that format and its example. Every form is judged whatever the option says.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        suite: str = "builtin",
        levels: int | Iterable[int] | None = None,
        task_filter: Callable[[Task], bool] | Iterable[str] | str | None = None,
        include_degenerate: bool = False,
        backend: str = "auto",
        reward: str | Callable[..., float] = "milestone",
        reward_mode: str = "per_step",
        max_turns: int = 8,
        precision: str | None = None,
        policy: str | None = None,
        eval_config: EvalConfig | None = None,
        evaluator: Any = None,
        data_path: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        render_mode: str | None = None,
        max_action_chars: int = 100_000,
        max_observation_chars: int = 200_000,
        judge_url: str | None = None,
        judge_token: str | None = None,
        language: str = "cuda",
    ) -> None:
        super().__init__()
        if backend not in ("auto", "cuda", "cpu"):
            raise ValueError(f"backend must be 'auto', 'cuda' or 'cpu', got {backend!r}")
        if language not in LANGUAGES:
            raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
        if language == "cupy" and backend == "cpu":
            raise ValueError("language='cupy' needs backend='cuda' (or 'auto' on a GPU): CuPy kernels run on a GPU only")
        self.language = language
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {reward_mode!r}")
        if int(max_turns) < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.suite = suite
        self.backend_request = backend
        self.reward_mode = reward_mode
        self.max_turns = int(max_turns)
        self.reward_fn = get_reward(reward)
        self.reward_name = reward if isinstance(reward, str) else getattr(reward, "__name__", "custom")
        self.data_path = data_path
        self.cache_dir = cache_dir

        base = eval_config or getattr(evaluator, "config", None) or EvalConfig()
        overrides = {k: v for k, v in (("precision", precision), ("policy", policy)) if v is not None}
        self.config: EvalConfig = base.replace(**overrides) if overrides else base
        # check: full correctness, no baselines, a single timed call without warm-up.
        self.check_config = self.config.for_check()
        # compile: the evaluator has no build-only mode; the cheapest evaluation (2 draws) stands in.
        self.compile_config = self.check_config.replace(correctness_trials=2)

        if judge_url and evaluator is not None:
            raise ValueError("pass evaluator or judge_url, not both")
        self.judge_url, self.judge_token = judge_url, judge_token
        self._evaluator = evaluator
        self._owns_evaluator = evaluator is None
        self._target: tuple[str, str] | None = None

        self.include_degenerate = include_degenerate
        self.tasks: list[Task] = self._load_tasks(suite, levels, task_filter)
        self._tasks_by_id = {t.id: t for t in self.tasks}

        self.action_space = spaces.Text(max_length=int(max_action_chars), min_length=0, charset=prompt_text.CHARSET)
        self.observation_space = spaces.Text(max_length=int(max_observation_chars), min_length=1,
                                             charset=prompt_text.CHARSET)
        self.max_action_chars = int(max_action_chars)
        self.max_observation_chars = int(max_observation_chars)

        self.task: Task | None = None
        self._turn = 0
        self._steps: list[tuple[str, EvalResult]] = []
        self._best: dict[str, Any] | None = None
        self._done = False
        self._last_observation = ""
        self._closed = False

    # ---------------------------------------------------------------------------------- tasks
    def _suite_kwargs(self, suite: str) -> dict[str, Any]:
        return {"data_path": self.data_path} if suite != "builtin" and self.data_path is not None else {}

    def _load_tasks(self, suite: str, levels: Any, task_filter: Any) -> list[Task]:
        if isinstance(levels, int):
            levels = (levels,)
        levels = tuple(int(level) for level in levels) if levels is not None else None
        tasks = load_suite(suite, levels=levels, **self._suite_kwargs(suite))
        tasks = without_degenerate(tasks, task_filter) if not self.include_degenerate else tasks
        if task_filter is not None:
            if callable(task_filter):
                tasks = [t for t in tasks if task_filter(t)]
            else:
                wanted = [task_filter] if isinstance(task_filter, str) else list(task_filter)
                known = {t.id for t in tasks}
                missing = [i for i in wanted if i not in known]
                if missing:
                    raise KeyError(f"task_filter names tasks that suite {suite!r} (levels {levels}) does not have: "
                                   f"{missing[:5]}{' ...' if len(missing) > 5 else ''}")
                wanted_set = set(wanted)
                tasks = [t for t in tasks if t.id in wanted_set]
        if not tasks:
            raise ValueError(f"no task left in suite {suite!r} with levels={levels} and the given task_filter")
        return tasks

    # ------------------------------------------------------------------------------ evaluator
    @property
    def evaluator(self) -> Any:
        """The evaluator (created on first use unless one was passed in)."""
        if self._evaluator is None:
            if self._closed:
                raise RuntimeError("this environment is closed")
            if self.judge_url:
                from ..eval.remote import RemoteEvaluator

                self._evaluator = RemoteEvaluator(self.judge_url, self.judge_token, config=self.config)
            else:
                from ..eval.evaluator import Evaluator

                self._evaluator = Evaluator(backend=self.backend_request, config=self.config, cache_dir=self.cache_dir)
            self._owns_evaluator = True
        return self._evaluator

    def _target_backend(self) -> tuple[str, str]:
        """(backend, hardware description). A CPU-only env never needs to start the evaluator for it."""
        if self._target is None:
            if self._evaluator is None and self.backend_request == "cpu":
                backend = "cpu"
            else:
                evaluator = self.evaluator
                backend = evaluator.backend if self.backend_request == "auto" else self.backend_request
            if backend == "cuda":
                hardware = f"GPU: {self.evaluator.device_name}"
            else:
                hardware = _cpu_description(self.config)
            self._target = (backend, hardware)
        return self._target

    @property
    def backend(self) -> str:
        return self._target_backend()[0]

    # ------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if options.get("task") is not None:
            task = options["task"]
            if not isinstance(task, Task):
                raise TypeError(f"options['task'] must be a cuda_gym Task, got {type(task).__name__}")
        elif options.get("task_id"):
            task = self._find_task(str(options["task_id"]))
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.task = task
        self._turn = 0
        self._steps = []
        self._verdicts = {}  # (EvalConfig, candidate source) -> this episode's verdict
        self._best = None
        self._done = False
        backend, hardware = self._target_backend()
        text = prompt_text.task_prompt(task, backend=backend, hardware=hardware, config=self.config,
                                       max_turns=self.max_turns, reward_mode=self.reward_mode,
                                       reward_name=self.reward_name, language=self.language)
        observation = prompt_text.to_observation(text, self.max_observation_chars)
        self._last_observation = observation
        return observation, {"task_id": task.id, "level": task.level, "backend": backend,
                             "max_turns": self.max_turns, "language": self.language}

    def _find_task(self, task_id: str) -> Task:
        if task_id in self._tasks_by_id:
            return self._tasks_by_id[task_id]
        suite = task_id.split("/", 1)[0]
        try:
            return get_task(task_id, **self._suite_kwargs(suite))
        except KeyError:
            raise KeyError(f"unknown task id {task_id!r}; this environment has {len(self.tasks)} tasks, "
                           f"e.g. {self.tasks[0].id!r}") from None

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over (submitted or out of turns); call reset()")
        task = self.task
        backend = self._target_backend()[0]
        self._turn += 1
        command, candidate, problem = self._parse_action(action)
        if problem is not None:
            result = EvalResult(task_id=task.id, backend=backend, error_code=ErrorCode.INVALID_ACTION,
                                message=problem, precision=self.config.precision, policy=self.config.policy)
        else:
            result = self._judge_once(task, command, candidate)
        history = [r for _, r in self._steps]
        self._update_best(command, candidate, result)
        self._steps.append((command, result))

        terminated = command == "submit" and problem is None  # a malformed action never ends the episode
        truncated = not terminated and self._turn >= self.max_turns
        self._done = terminated or truncated
        if self.reward_mode == "per_step":
            if command == "compile" and result.compiled:
                reward = 0.0  # compile reports only the build: nothing to reward yet
            else:
                reward = float(self.reward_fn(result, history))
        else:
            reward = self._final_reward() if self._done else 0.0

        text = prompt_text.feedback(result, command=command, turn=self._turn, max_turns=self.max_turns,
                                    reward=reward if (self.reward_mode == "per_step" or self._done) else None,
                                    best=self._best, candidate_form=candidate.form if candidate else "",
                                    policy=self.config.policy, done=self._done)
        observation = prompt_text.to_observation(text, self.max_observation_chars)
        self._last_observation = observation
        info = {
            "task_id": task.id, "level": task.level, "backend": backend, "turn": self._turn, "command": command,
            "verdict": result.error_code.value, "compiled": result.compiled, "correct": result.correct,
            "result": result.to_dict(), "best": self._best_info(),
        }
        return observation, reward, terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        return None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns_evaluator and self._evaluator is not None:
            self._evaluator.close()
        self._evaluator = None
        super().close()

    # ----------------------------------------------------------------------------- internals
    def _judge_once(self, task: Task, command: str, candidate: Candidate) -> EvalResult:
        """The verdict of `command`'s judge on `candidate`, judged once per episode: the same source
        under the same judge gets the episode's first verdict again (flag `repeated_candidate`), so
        re-submitting a candidate cannot draw a luckier timing. An INTERNAL_ERROR is not kept."""
        config = {"compile": self.compile_config, "check": self.check_config}.get(command, self.config)
        key = (config, candidate.source)  # EvalConfig is frozen, so hashable
        if key in self._verdicts:
            result = copy.deepcopy(self._verdicts[key])
            result.flags.append(REPEATED_FLAG)
            return result
        result = self.evaluator.evaluate(task, candidate, backend=None if self.backend_request == "auto"
                                         else self.backend_request, config=config)
        if result.error_code is not ErrorCode.INTERNAL_ERROR:
            self._verdicts[key] = copy.deepcopy(result)
        return result

    def _parse_action(self, action: Any) -> tuple[str, Candidate | None, str | None]:
        """(command, candidate, problem); problem is an INVALID_ACTION message or None."""
        command = prompt_text.DEFAULT_COMMAND
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
        if not isinstance(action, str):
            return command, None, (f"the action must be a string (a command line and/or a Python source), "
                                   f"got {type(action).__name__}")
        if len(action) > self.max_action_chars:
            return command, None, (f"the action is {len(action)} characters; the limit is {self.max_action_chars}. "
                                   "Send only the candidate source.")
        body = action
        stripped = action.lstrip()
        first_line, _, rest = stripped.partition("\n")
        match = _COMMAND_LINE.match(first_line.strip())
        explicit = False
        if match:
            word = match.group(1).lower()
            if word not in prompt_text.COMMANDS:
                return command, None, (f"unknown command {match.group(1)!r} on the first line; use one of "
                                       + ", ".join(f"'#! {c}'" for c in prompt_text.COMMANDS))
            command, body, explicit = word, rest, True
        if not body.strip():
            return command, None, (f"the action has no candidate source after the '#! {command}' line" if explicit
                                   else "the action is empty")
        try:
            candidate = parse_candidate(body)
        except InvalidCandidate as exc:
            return command, None, str(exc)
        if not explicit:  # a command line may also open the fenced code block
            inner, _, inner_rest = candidate.source.lstrip().partition("\n")
            inner_match = _COMMAND_LINE.match(inner.strip())
            if inner_match and inner_match.group(1).lower() in prompt_text.COMMANDS:
                command = inner_match.group(1).lower()
                candidate = Candidate(inner_rest)  # the same source as without the line (build cache)
        return command, candidate, None

    def _update_best(self, command: str, candidate: Candidate | None, result: EvalResult) -> None:
        if not (result.correct and result.candidate_time is not None and candidate is not None):
            return
        full = command in FULL_COMMANDS
        key = (full, -result.candidate_time.median_ms)
        if self._best is not None and key <= (self._best["fully_timed"], -self._best["time_ms"]):
            return
        entry: dict[str, Any] = {
            "found": True, "turn": self._turn, "command": command, "fully_timed": full,
            "time_ms": float(result.candidate_time.median_ms), "candidate_hash": result.candidate_hash,
            "candidate": candidate.source,
        }
        if result.speedup_vs_eager is not None:
            entry["speedup_vs_eager"] = float(result.speedup_vs_eager)
        if result.speedup_vs_compile is not None:
            entry["speedup_vs_compile"] = float(result.speedup_vs_compile)
        self._best = entry

    def _best_info(self) -> dict[str, Any]:
        return copy.deepcopy(self._best) if self._best is not None else {"found": False}

    def episode_reward(self) -> float:
        """The reward `reward_mode="final"` gives this episode, also before it is over (a policy that
        stopped early): see `_final_reward`."""
        if self.task is None:
            raise RuntimeError("call reset() before episode_reward()")
        return self._final_reward()

    def _final_reward(self) -> float:
        """Best reward over the episode's fully evaluated candidates (eval / submit); if there were
        none, over its checked candidates; if none either, the reward of an unjudged episode.
        Malformed actions (INVALID_ACTION) count as neither."""
        for commands in (FULL_COMMANDS, ("check",)):
            scored = [(i, r) for i, (c, r) in enumerate(self._steps)
                      if c in commands and r.error_code is not ErrorCode.INVALID_ACTION]
            if scored:
                history = [r for _, r in self._steps]
                return max(float(self.reward_fn(r, history[:i])) for i, r in scored)
        task = self.task
        assert task is not None
        nothing = EvalResult(task_id=task.id, backend=self._target_backend()[0], error_code=ErrorCode.INVALID_ACTION,
                             message="no candidate was checked or evaluated in this episode")
        return float(self.reward_fn(nothing, [r for _, r in self._steps]))

    # ------------------------------------------------------------------------------- helpers
    @property
    def turn(self) -> int:
        return self._turn

    @property
    def history(self) -> Sequence[tuple[str, EvalResult]]:
        """(command, result) of each step of the current episode."""
        return tuple(self._steps)
