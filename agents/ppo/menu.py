"""The `menu` toy suite: real tasks, a tiny action space, learning visible within minutes on a CPU.

Each episode is one task of the `menu` suite (`menu/L1/elu`, `softplus`, `tanh`: elementwise
level-1 tasks at small sizes) and one turn. The policy reads a short token prompt
`[BOS, <task>, SEP, A, B, C, D, E, F, ASK]` and answers with one token, which should be a label.
`MenuEnv` expands the label into one of four fixed candidate sources written here for that task and
submits it to the real `KernelEnv` (real build, real correctness trials, real timing against eager
and torch.compile, milestone reward):

- "fast": the right formula in a vectorised loop (`#pragma omp simd`, `-ffast-math`,
  `-march=native`: gcc calls glibc's vector math); judged 1.4-1.7x (elu, softplus) and 4.6x (tanh)
  faster than the faster of eager and torch.compile on one core: it earns 3;
- "slow": the right formula in a plain scalar loop (correct, 4-15x slower than eager: it earns 1);
- "wrong": a formula with a small error, built like "fast" (INCORRECT, -1);
- "broken": a C++ syntax error (COMPILE_ERROR, -1).

The menu is judged with one CPU thread (`menu_eval_config`): on a shared 2-core machine the
multi-threaded timings (torch's OpenMP pool, and a candidate's own) swing by milliseconds with the
other jobs' load, one-thread timings do not.

Which label means which candidate differs per task (`label_kinds`): each task owns two labels, its
fast and its slow one, and every other label names its wrong or broken candidate, so the policy has
to read the task token. Any other token goes to the environment as the raw reply, which judges it
`INVALID_ACTION` (a format error, reward -1). A random policy picks a label 6 times in 16 and then
the task's fast candidate once in 6.

Each (task, candidate) pair is judged once per `MenuEnv` and its verdict and reward reused: the
candidates are fixed, so this only saves time and keeps a choice's reward from moving with timing
noise between episodes. What each candidate earned is in `MenuEnv.judged` (and the run's JSON).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from cuda_gym.tasks import Task, get_task, register_suite
from cuda_gym.tasks.task import task_from_source

from ..rft import FinetuneConfig
from cuda_gym.trajectory import Trajectory, Turn
from .config import PPOConfig

# name -> (correct expression of v, wrong expression of v).
MENU_TASKS: dict[str, tuple[str, str]] = {
    "elu": ("v > 0.f ? v : std::expm1(v)", "v > 0.f ? v : std::exp(v)"),
    "softplus": ("v > 20.f ? v : std::log1p(std::exp(v))", "v > 20.f ? v : std::log(2.f + std::exp(v))"),
    "tanh": ("std::tanh(v)", "std::tanh(0.9f * v)"),
}
# Smaller inputs than the built-in tasks' (a judgement then takes a few seconds on a CPU).
MENU_SIZES = {"cpu": {"batch_size": 256, "dim": 1024}, "cuda": {"batch_size": 4096, "dim": 4096}}
KINDS = ("fast", "slow", "wrong", "broken")
LABELS = ("A", "B", "C", "D", "E", "F")  # two per task: its "fast" and its "slow" label

# The references: built-in tasks where one exists, else written here in KernelBench format.
_TANH_REFERENCE = '''"""Hyperbolic tangent applied elementwise."""
import torch
import torch.nn as nn

batch_size = 4096
dim = 4096


class Model(nn.Module):
    """torch.tanh(x)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

# The toy vocabulary: special tokens, labels, one token per task, then filler words a random policy
# emits too (so a format error is a real possibility it has to unlearn).
PAD, BOS, EOS, SEP, ASK = 0, 1, 2, 3, 4
LABEL_TOKENS = {label: 5 + i for i, label in enumerate(LABELS)}
TASK_TOKEN_BASE = 5 + len(LABELS)
VOCAB_SIZE = 16
TOKEN_NAMES = {PAD: "<pad>", BOS: "<s>", EOS: "</s>", SEP: "|", ASK: "?", **{t: l for l, t in LABEL_TOKENS.items()}}

_SOURCE = '''import torch
import torch.nn as nn

from cuda_gym.native import load_kernels

_lib = load_kernels(
    cpp=r"""
#include <cmath>
#include <cstdint>

extern "C" void menu_forward(const float* x, float* y, int64_t n) {{
    {pragma}
    for (int64_t i = 0; i < n; ++i) {{ float v = x[i]; y[i] = {expression}; }}
}}
""",
    functions=["void menu_forward(const float* x, float* y, int64_t n)"],
    extra_cflags={cflags},
)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.menu_forward(x, y, x.numel())
        return y
'''
VECTOR_CFLAGS = ["-O3", "-fopenmp-simd", "-ffast-math", "-march=native"]
SCALAR_CFLAGS = ["-O3"]


def candidate_source(name: str, kind: str) -> str:
    """The source of the `kind` candidate of menu task `name`."""
    right, wrong = MENU_TASKS[name]
    vector = kind != "slow"
    source = _SOURCE.format(pragma="#pragma omp simd" if vector else "",
                            expression=wrong if kind == "wrong" else right,
                            cflags=VECTOR_CFLAGS if vector else SCALAR_CFLAGS)
    if kind == "broken":
        source = source.replace("float v = x[i];", "float v = x[i]")
    return source


def load_menu() -> list[Task]:
    """The `menu` suite: `menu/L1/<name>` at `MENU_SIZES` (the built-in task's reference where one exists)."""
    tasks = []
    for name in MENU_TASKS:
        if name == "tanh":
            reference = task_from_source(_TANH_REFERENCE, task_id="menu/L1/tanh", level=1, name="tanh")
        else:
            reference = get_task(f"builtin/L1/{name}")
        tasks.append(replace(reference, id=f"menu/L1/{name}", sizes=MENU_SIZES,
                             description=f"{reference.description} (menu: pick one of four candidates)"))
    return tasks


register_suite("menu", load_menu)


def label_kinds(name: str, seed: int = 0) -> dict[str, str]:
    """Which candidate each label names for task `name`. Task i (in `MENU_TASKS` order) owns two
    labels, its "fast" and its "slow" one (`LABELS[2i]`, `LABELS[2i + 1]`, rotated by `seed`); every
    other label names its "wrong" or "broken" candidate. So each label is correct for exactly one
    task: no answer is right everywhere (a policy must read the task token to earn more than -1 on
    average), and learning one task's right label never makes another task's slow choice likelier."""
    index = list(MENU_TASKS).index(name)
    owned = {LABELS[(2 * index + seed) % len(LABELS)]: "fast", LABELS[(2 * index + 1 + seed) % len(LABELS)]: "slow"}
    others = [label for label in LABELS if label not in owned]
    return {label: owned.get(label) or ("wrong", "broken")[others.index(label) % 2] for label in LABELS}


def prompt_ids(task_index: int) -> list[int]:
    return [BOS, TASK_TOKEN_BASE + task_index, SEP, *LABEL_TOKENS.values(), ASK]


def decode(token_ids: Sequence[int]) -> str:
    return " ".join(TOKEN_NAMES.get(t, f"w{t}") for t in token_ids)


def parse_reply(token_ids: Sequence[int]) -> str | None:
    """The label of a well-formed reply (exactly one label token), else None."""
    labels = {token: label for label, token in LABEL_TOKENS.items()}
    if len(token_ids) == 1 and token_ids[0] in labels:
        return labels[token_ids[0]]
    return None


def tiny_policy(seed: int = 0, hidden_size: int = 64, layers: int = 2):
    """A randomly initialised Llama-architecture causal LM over the menu vocabulary (about 0.1M
    parameters at the defaults). Nothing is downloaded."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=32, tie_word_embeddings=False, bos_token_id=BOS,
                         eos_token_id=EOS, pad_token_id=PAD)
    return LlamaForCausalLM(config)


# RFT and value pretraining on the menu's sampled batches (sized for the tiny policy). RFT keeps the
# R > 0 episodes, the slow choices with the fast ones, only about 3 of each per task from 3 random
# batches: 10 epochs fitted the kept set's chance imbalance (seeds 0-3: one seed then stayed on a slow
# choice for all 30 updates); 2 epochs learn the format and keep the policy open.
MENU_RFT_CONFIG = FinetuneConfig(epochs=2, lr=1e-3, minibatch_size=8, micro_batch_size=8)
MENU_VALUE_CONFIG = FinetuneConfig(epochs=4, lr=1e-3, minibatch_size=16, micro_batch_size=16)


def menu_ppo_config(**overrides: Any) -> PPOConfig:
    """The PPO settings that train `tiny_policy` on the menu in minutes: the paper's GAE, clip and
    critic; learning rates and batch sized for a 0.1M-parameter model and 48-episode batches; raw
    advantages (no whitening): once the policy is solved every episode earns 3, and whitening would
    blow the critic's small errors up to unit-size advantages (measured: all three seeds of RFT +
    value + PPO fell from 3.0 to about 1.6 within a few updates of reaching it, and stayed there)."""
    settings = dict(actor_lr=1e-3, critic_lr=1e-3, batch_size=48, minibatch_size=16, micro_batch_size=16,
                    update_epochs=2, normalize_advantages=False, checkpoint_every=0)
    settings.update(overrides)
    return PPOConfig(**settings)


def menu_eval_config():
    """The menu's evaluation settings: every stage runs (5 correctness draws, timing, the eager and
    torch.compile baselines), on one CPU thread (see the module's docstring), with at least 10 timed
    calls per median (with 3 to 5, softplus's fast candidate once earned 1 instead of 3 at load 15)."""
    from cuda_gym.eval import EvalConfig

    return EvalConfig(baselines=("eager", "compile"), baseline_workers=1, cpu_threads=1, timing_reps=20,
                      timing_min_reps=10, warmup_reps=2, timing_budget_s=1.0, eval_timeout_s=120.0,
                      compile_timeout_s=240.0)


@dataclass
class Judged:
    """What one menu candidate earned from the real environment."""

    reward: float
    error_code: str
    observation: str
    result: dict[str, Any] | None
    speedup_vs_eager: float | None
    seconds: float


class MenuEnv:
    """The menu over a real `KernelEnv` (one turn, final reward, milestone). `evaluator`: a CPU
    `Evaluator` the caller owns (the candidates are C++ loops over host memory: the menu runs on the
    CPU backend only); `tasks`: names from `MENU_TASKS` (default all)."""

    def __init__(self, evaluator: Any, tasks: Sequence[str] | None = None, *, backend: str = "cpu", seed: int = 0):
        from cuda_gym.envs.kernel_env import KernelEnv

        if backend != "cpu":
            raise ValueError(f"the menu runs on the CPU backend only (its candidates are C++ loops over host "
                             f"memory), got backend={backend!r}: use --backend cpu")
        self.names = list(tasks or MENU_TASKS)
        unknown = [n for n in self.names if n not in MENU_TASKS]
        if unknown:
            raise KeyError(f"unknown menu tasks {unknown}; choose from {sorted(MENU_TASKS)}")
        self.env = KernelEnv(suite="menu", backend=backend, evaluator=evaluator, max_turns=1, reward="milestone",
                             reward_mode="final", task_filter=[f"menu/L1/{n}" for n in self.names])
        self.labels = {name: label_kinds(name, seed) for name in self.names}
        self.judged: dict[tuple[str, str], Judged] = {}

    def step(self, name: str, reply_ids: Sequence[int]) -> tuple[Judged, str | None]:
        """Judge a reply for task `name`; returns what it earned and the candidate kind (None when
        the reply was malformed)."""
        label = parse_reply(reply_ids)
        kind = self.labels[name][label] if label else None
        key = (name, kind or "")
        if kind is None or key not in self.judged:
            action = f"#! submit\n{candidate_source(name, kind)}" if kind else decode(reply_ids)
            started = time.perf_counter()
            self.env.reset(options={"task_id": f"menu/L1/{name}"})
            observation, reward, _, _, info = self.env.step(action)
            judged = Judged(reward=float(reward), error_code=info["verdict"], observation=observation,
                            result=info.get("result"), speedup_vs_eager=info["result"].get("speedup_vs_eager"),
                            seconds=time.perf_counter() - started)
            if kind is None:
                return judged, None
            self.judged[key] = judged
        return self.judged[key], kind

    def judge_all(self) -> dict[str, dict[str, float]]:
        """Judge every candidate of every task once (so a run's rewards are fixed up front);
        returns {task: {kind: reward}}."""
        for name in self.names:
            for label, kind in self.labels[name].items():
                self.step(name, [LABEL_TOKENS[label]])
        return {name: {kind: self.judged[(name, kind)].reward for kind in KINDS} for name in self.names}

    def best_mean_reward(self) -> float:
        """The mean reward of a policy that always picks each task's best candidate."""
        return sum(max(self.judged[(n, k)].reward for k in KINDS) for n in self.names) / len(self.names)

    def close(self) -> None:
        self.env.close()


@torch.no_grad()
def sample_replies(policy, prompts: torch.Tensor, max_new_tokens: int = 1,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample `max_new_tokens` tokens for each prompt row (temperature 1); returns `(token_ids,
    logprobs)` `[N, max_new_tokens]`, the logprobs being `log_softmax` of the raw logits at each
    sampled token (what a forward pass recomputes)."""
    policy.eval()
    ids = prompts
    tokens, logprobs = [], []
    for _ in range(max_new_tokens):
        logits = policy(input_ids=ids, use_cache=False).logits[:, -1].float()
        log_probs = torch.log_softmax(logits, -1)
        token = torch.multinomial(log_probs.exp(), 1, generator=generator)
        tokens.append(token)
        logprobs.append(log_probs.gather(-1, token))
        ids = torch.cat([ids, token], dim=1)
    return torch.cat(tokens, 1), torch.cat(logprobs, 1)


def play_menu(policy, menu: MenuEnv, episodes_per_task: int, *, generator: torch.Generator | None = None,
              model_name: str = "menu-tiny") -> list[Trajectory]:
    """One batch of menu episodes (one turn, one generated token each), as `Trajectory` records with
    the prompt ids, generated ids and logprobs recorded at sampling."""
    device = next(policy.parameters()).device
    jobs = [(index, name) for index, name in enumerate(menu.names) for _ in range(episodes_per_task)]
    prompts = torch.tensor([prompt_ids(index) for index, _ in jobs], device=device)
    tokens, logprobs = sample_replies(policy, prompts, generator=generator)
    trajectories = []
    for episode, ((index, name), row, row_logprobs) in enumerate(zip(jobs, tokens.tolist(), logprobs.tolist())):
        reply_ids, reply_logprobs = row, row_logprobs
        judged, kind = menu.step(name, reply_ids)
        turn = Turn(index=1, messages=[{"role": "user", "content": decode(prompt_ids(index))}],
                    reply=decode(reply_ids), command="submit" if kind else None, observation=judged.observation,
                    reward=judged.reward, error_code=judged.error_code,
                    candidate=candidate_source(name, kind) if kind else None,
                    speedup_vs_eager=judged.speedup_vs_eager, result=judged.result, eval_seconds=judged.seconds,
                    prompt_token_ids=prompt_ids(index), token_ids=reply_ids, logprobs=reply_logprobs,
                    usage={"prompt_tokens": len(prompt_ids(index)), "completion_tokens": len(reply_ids)},
                    finish_reason="stop")
        trajectories.append(Trajectory(task_id=f"menu/L1/{name}", level=1, episode=episode, backend="menu",
                                       model=model_name, turns=[turn], end_reason="submit" if kind else "max_turns",
                                       total_reward=judged.reward, env_backend=menu.env.backend_request,
                                       max_turns=1, sampling={"temperature": 1.0, "max_new_tokens": 1}))
    return trajectories
