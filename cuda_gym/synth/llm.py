"""The LLM composer: a chat model picks the operators (and any parameters) of each task; the plan
goes through the same shape rules, sizing and rendering as the rule composer's.

`chat` is a `cuda_gym.chat.ChatModel`: any object with `chat(messages) -> reply`, where messages are
`{"role", "content"}` dicts and the reply has `.text` (the `cuda_gym_agents.llm` backends: `OpenAIChat`,
`TransformersChat`, `ScriptedChat`), or is a string. The model answers with JSON:

    {"input": "image", "ops": [{"op": "conv2d", "params": {"kernel_size": 3}}, {"op": "gelu"}]}

Each request carries a seeded hint (an input kind and an operator to include) so that candidates
differ; parameters the model leaves out are drawn from the seeded RNG. A reply that is not such
JSON, or names an operator or parameter the shape rules refuse, is sent back once with the error
(`retries`); after that the candidate counts as `compose_failed` with the reason. Replies are only
as reproducible as the backend's sampling (temperature 0 or a fixed server seed).
"""
from __future__ import annotations

import json
import random
import re
from typing import Any

from ..chat import ChatModel
from .catalogue import HEAVY_FAMILIES, PlanError, SeedOp, describe_catalogue
from .compose import INPUT_KINDS, ComposerConfig, TaskPlan, build_plan

SYSTEM_PROMPT = """\
You design GPU-kernel optimisation tasks. A task is a PyTorch model that applies {min_ops} to {max_ops} operators \
in sequence to one input tensor. Choose the input kind and the operators from the catalogue below; the shapes \
must chain (convolutions and pools need a channels-first image/signal/volume input; linear, layer norm, attention \
and recurrent ops work on the last dimension of features/sequence inputs). Prefer combinations a real model would \
use, with at least one compute-heavy operator when it fits.

Input kinds: {kinds}.
Catalogue (name, family, origin, parameters you may set):
{catalogue}

Answer with one JSON object and nothing else:
{{"input": "<input kind>", "ops": [{{"op": "<name>", "params": {{"<param>": <value>}}}}, ...]}}
"params" is optional; leave a parameter out to let the system choose it."""


def _reply_text(reply: Any) -> str:
    return reply if isinstance(reply, str) else str(getattr(reply, "text", reply))


def parse_plan_reply(text: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(input kind, [(op, params)]) from a model reply; raises PlanError saying what is wrong."""
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", text, re.S)
    candidate = fenced.group(1) if fenced else text[text.find("{"): text.rfind("}") + 1]
    try:
        data = json.loads(candidate)
    except ValueError as exc:
        raise PlanError(f"the reply is not one JSON object ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("ops"), list):
        raise PlanError('the JSON needs an "ops" list, e.g. {"input": "image", "ops": [{"op": "conv2d"}]}')
    kind = data.get("input")
    if kind not in INPUT_KINDS:
        raise PlanError(f'"input" must be one of {", ".join(INPUT_KINDS)}, got {kind!r}')
    ops = []
    for item in data["ops"]:
        if isinstance(item, str):
            ops.append((item, {}))
        elif isinstance(item, dict) and isinstance(item.get("op"), str):
            params = item.get("params") or {}
            if not isinstance(params, dict):
                raise PlanError(f'"params" of {item["op"]} must be an object')
            ops.append((item["op"], dict(params)))
        else:
            raise PlanError(f'each entry of "ops" must be {{"op": name, "params": {{...}}}}, got {item!r}')
    return kind, ops


class LLMComposer:
    """Composes candidate `index` by asking `chat` (see the module docstring)."""

    name = "llm"

    def __init__(self, chat: ChatModel, catalogue: dict[str, SeedOp], seed: int = 0, config: ComposerConfig | None = None,
                 retries: int = 1, concurrency: int = 4):
        if not callable(getattr(chat, "chat", None)):
            raise TypeError("chat must have a chat(messages) method (a cuda_gym.chat.ChatModel, e.g. a "
                            "cuda_gym_agents.llm backend)")
        self.chat = chat
        self.catalogue = catalogue
        self.seed = seed
        self.config = config or ComposerConfig()
        self.retries = retries
        self.concurrency = concurrency
        self.system_prompt = SYSTEM_PROMPT.format(min_ops=self.config.min_ops, max_ops=self.config.max_ops,
                                                  kinds=", ".join(INPUT_KINDS),
                                                  catalogue=describe_catalogue(catalogue))

    def _hint(self, rng: random.Random) -> str:
        kinds = list(self.config.input_kind_weights)
        kind = rng.choices(kinds, [self.config.input_kind_weights[k] for k in kinds])[0]
        heavy = [op.name for op in self.catalogue.values() if op.family in HEAVY_FAMILIES]
        include = rng.choice(heavy if rng.random() < self.config.heavy_first else list(self.catalogue))
        count = rng.randint(self.config.min_ops, self.config.max_ops)
        return (f"Design task number {rng.randrange(10**6)}: a {kind} input, {count} operators, "
                f"and include {include} if it fits.")

    def compose(self, index: int) -> TaskPlan:
        rng = random.Random(f"cuda_gym.synth.llm:{self.seed}:{index}")
        messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": self._hint(rng)}]
        error = ""
        for _ in range(self.retries + 1):
            try:
                text = _reply_text(self.chat.chat(messages))
            except Exception as exc:  # a dead server, a timeout: this candidate fails, the run goes on
                raise PlanError(f"candidate {index}: the chat backend failed: {exc}") from None
            try:
                kind, ops = parse_plan_reply(text)
                if not self.config.min_ops <= len(ops) <= self.config.max_ops:
                    raise PlanError(f"use {self.config.min_ops} to {self.config.max_ops} operators, not {len(ops)}")
                return build_plan(self.catalogue, ops, input_kind=kind, rng=rng, index=index, seed=self.seed,
                                  sizing=self.config.sizing, composer=self.name)
            except PlanError as exc:
                error = str(exc)
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": f"That plan cannot be built: {error}. Answer with a "
                                                         "corrected JSON object only."}]
        raise PlanError(f"candidate {index}: the model's plan cannot be built: {error}")
