"""The schedule machinery: a task's reference -> a plan of csrc/ template kernels -> tuned knobs -> a
candidate `ModelNew` in the recommended form (`cuda_gym.native.load_kernels`).

    plan = plan_task(task, backend="cuda")          # raises Unsupported with the reason
    space = KnobSpace.for_plan(plan)                # the knobs that matter for this plan, and their masks
    source = render_candidate(plan, space.default())

The schedule environment (`cuda_gym.envs.schedule_env`) acts in the knob space; the template agent
(`cuda_gym_agents.template_agent`) searches it. Modules, bottom up: `templates` (where csrc/templates
is), `expressions` (pointwise expression trees and their C code), `plan` (buffers, stages,
broadcasting), `tracer` (torch.fx trace -> plan), `knobs` (knob spaces and masks), `render` (plan +
knobs -> kernels and candidate source).

The candidate subclasses the reference's own `Model` (its source is embedded), so it has the same
constructor and parameter names, and overrides `forward` with the template calls; shapes are fixed at
plan time and checked on every call.
"""
from .expressions import V, expr_to_c
from .knobs import CPU_KNOBS, CUDA_KNOBS, CUDNN_KINDS, Knob, KnobSpace, knobs_for
from .plan import Buffer, Operand, Plan, Stage, broadcast_terms
from .render import render_candidate, render_kernels
from .templates import TEMPLATE_DIR_ENV, Unsupported, read_template, template_dir
from .tracer import plan_task, trace_task

__all__ = [
    "V", "expr_to_c", "CPU_KNOBS", "CUDA_KNOBS", "CUDNN_KINDS", "Knob", "KnobSpace", "knobs_for", "Buffer",
    "Operand", "Plan", "Stage", "broadcast_terms", "render_candidate", "render_kernels", "TEMPLATE_DIR_ENV",
    "Unsupported", "read_template", "template_dir", "plan_task", "trace_task",
]
