"""The built-in suite: enough tasks, well-formed, each runs eagerly on the CPU at its CPU size."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from cuda_gym.tasks import BACKENDS, get_task, load_suite, solution_path, task_from_source
from cuda_gym.tasks.task import TaskFormatError

BUILTIN = load_suite("builtin")


def test_builtin_suite_has_at_least_36_tasks_over_three_levels():
    assert len(BUILTIN) >= 36
    for level in (1, 2, 3):
        assert len([t for t in BUILTIN if t.level == level]) >= 12


def test_at_least_six_reference_solutions_per_level_and_backend():
    for backend in BACKENDS:
        for level in (1, 2, 3):
            solved = [t for t in BUILTIN if t.level == level and solution_path(t, backend)]
            assert len(solved) >= 6, (backend, level, [t.id for t in solved])


@pytest.mark.parametrize("task", BUILTIN, ids=[t.id for t in BUILTIN])
def test_task_runs_eagerly_on_cpu_at_cpu_size(task):
    assert set(task.sizes) == set(BACKENDS), "every built-in task declares cuda and cpu sizes"
    assert task.description, "the docstring's first line describes the task"
    namespace = task.namespace("cpu")
    for name, value in task.sizes_for("cpu").items():
        assert namespace[name] == value
    torch.manual_seed(0)
    model = namespace["Model"](*namespace["get_init_inputs"]()).eval()
    first = namespace["get_inputs"]()
    second = namespace["get_inputs"]()
    flipped = [-x if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in first]
    flipped[1:] = first[1:]  # negate only the first input: a product of two negated inputs is unchanged
    with torch.no_grad():
        outputs = [_flat(model(*inputs)) for inputs in (first, second, flipped)]
    for out, other, neg in zip(*outputs):
        assert torch.isfinite(out).all()
        assert not torch.equal(out, other), "output must depend on the inputs (two draws gave the same output)"
        if first and isinstance(first[0], torch.Tensor) and first[0].is_floating_point():
            assert not torch.equal(out, neg), "output must not ignore the sign of its input (ReLU on [0, 1)?)"


def _flat(output):
    return list(output) if isinstance(output, (tuple, list)) else [output]


def test_get_task_and_unknown_ids():
    assert get_task("builtin/L1/softmax").name == "softmax"
    with pytest.raises(KeyError, match="cuda-gym tasks list"):
        get_task("builtin/L1/no_such_task")


def test_task_format_errors_are_clear():
    with pytest.raises(TaskFormatError, match="not valid Python"):
        task_from_source("def (", task_id="x/L1/bad", level=1, name="bad")
    with pytest.raises(TaskFormatError, match="literal dict"):
        task_from_source("CUDA_GYM = dict(a=f())", task_id="x/L1/bad", level=1, name="bad")
    task = task_from_source("import torch\n", task_id="x/L1/empty", level=1, name="empty")
    with pytest.raises(TaskFormatError, match="Model"):
        task.namespace("cpu")


def test_cli_lists_builtin_tasks():
    out = subprocess.run([sys.executable, "-m", "cuda_gym.cli", "tasks", "list"], capture_output=True, text=True,
                         check=True).stdout
    assert f"suite builtin: {len(BUILTIN)} tasks" in out
    assert "builtin/L2/linear_gelu" in out
    help_text = subprocess.run([sys.executable, "-m", "cuda_gym.cli", "--help"], capture_output=True, text=True,
                               check=True).stdout
    for command in ("tasks", "eval", "run"):
        assert command in help_text
