"""A `TaskPlan` as a KernelBench-format task file with CUDA_GYM metadata (docs/task-format.md).

The file's module-level constants are the CUDA sizes; `CUDA_GYM["sizes"]` holds both backends'.
`CUDA_GYM["synth"]` records the seed operators, where they come from, the composer and the seed, so
a task says how it was made. Rendering is a pure function of the plan.
"""
from __future__ import annotations

import re

from ..tasks.task import BACKENDS
from .catalogue import BATCH
from .compose import TaskPlan

HEADER_IMPORTS = ("import torch", "import torch.nn as nn", "import torch.nn.functional as F")


def _literal(value: object, indent: int) -> str:
    pad = " " * indent
    if isinstance(value, dict) and value and any(isinstance(v, (dict, list)) for v in value.values()):
        inner = ",\n".join(f"{pad}    {key!r}: {_literal(item, indent + 4)}" for key, item in value.items())
        return "{\n" + inner + f",\n{pad}}}"
    return repr(value)


def metadata(plan: TaskPlan) -> dict:
    return {
        "tags": ["synth", *dict.fromkeys(plan.ops)],
        "sizes": {backend: plan.sizes(backend) for backend in BACKENDS},
        "synth": {"ops": plan.ops, "sources": [s.source for s in plan.steps], "input": plan.input_kind,
                  "composer": plan.composer, "seed": plan.seed, "candidate": plan.index},
    }


def render(plan: TaskPlan) -> str:
    """The task source of `plan`."""
    attrs = [f"{step.op}_{position}" for position, step in enumerate(plan.steps)]
    init_lines, forward_lines = [], []
    for attr, step in zip(attrs, plan.steps):
        module = f"self.{attr}"
        if step.module is not None:
            init_lines.append(f"{module} = {step.module}")
            init_lines.extend(line.format(m=module) for line in step.init)
        forward_lines.append(f"x = {step.forward.format(x='x', m=module)}")
    used = set(re.findall(r"[A-Za-z_]\w*", "\n".join(init_lines)))
    init_args = [name for name in plan.constants if name != BATCH and name in used]
    imports = list(HEADER_IMPORTS) + sorted({line for step in plan.steps for line in step.imports})
    constants = plan.sizes("cuda")
    signature = ", ".join(["self", *init_args])
    body_init = "\n".join(f"        {line}" for line in ["super().__init__()", *init_lines])
    body_forward = "\n".join(f"        {line}" for line in [*forward_lines, "return x"])
    input_dims = ", ".join(d.expr for d in plan.input_shape)
    description = " -> ".join(plan.ops)
    return (
        f'"""{description}: synthesized by cuda_gym.synth ({plan.composer} composer, seed {plan.seed}, '
        f'candidate {plan.index})."""\n'
        + "\n".join(imports) + "\n\n"
        + f"CUDA_GYM = {_literal(metadata(plan), 0)}\n\n"
        + "".join(f"{name} = {value}\n" for name, value in constants.items()) + "\n\n"
        + "class Model(nn.Module):\n"
        + f"    def __init__({signature}):\n{body_init}\n\n"
        + f"    def forward(self, x):\n{body_forward}\n\n\n"
        + f"def get_inputs():\n    return [torch.randn({input_dims})]\n\n\n"
        + f"def get_init_inputs():\n    return [{', '.join(init_args)}]\n"
    )
