"""A task whose fp32 reference output is itself rounding noise (KernelBench L2/23_Conv3d_GroupNorm_Mean:
the true output is about 1e-16, the fp32 one about 1e-7): the eval worker measures the reference
against its float64 twin before the candidate loads, and where that error is beyond the policy's
tolerances the candidate is held to a multiple of it instead (correctness.tolerance_floor). A
correct candidate that sums in another order passes; a wrong one still fails; a well-conditioned
task is judged exactly as before."""
from __future__ import annotations

import numpy as np
import pytest

from cuda_gym.eval import ErrorCode, EvalConfig, Evaluator
from cuda_gym.eval.correctness import tolerance_floor
from cuda_gym.eval.judgement import Judgement, complete_reference_error
from cuda_gym.eval.memory import MemoryPlan, float64_twin_fits
from cuda_gym.eval.protocol import Message
from cuda_gym.eval.result import EvalResult
from cuda_gym.tasks import get_task, solution_path, task_from_source

# Conv, group norm, then the mean over every non-batch dimension: L2/23 in two dimensions. With the
# group norm's default affine weights the true output is zero; the fp32 one is rounding noise.
GROUP_NORM_MEAN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3)
        self.group_norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.group_norm(self.conv(x)).mean(dim=[1, 2, 3])


def get_inputs():
    return [torch.rand(8, 3, 32, 32)]


def get_init_inputs():
    return [16, 4]
'''

# The same math, summed otherwise: in float64, cast back to float32 (what the truth rounds to) ...
IN_FLOAT64 = '''

class ModelNew(Model):
    def forward(self, x):
        y = self.conv(x).double()
        norm = self.group_norm
        y = torch.nn.functional.group_norm(y, norm.num_groups, norm.weight.double(), norm.bias.double(), norm.eps)
        return y.mean(dim=[1, 2, 3]).float()
'''

# ... or in float32, the final mean taken over the elements in the reverse order.
REVERSED_ORDER = '''

class ModelNew(Model):
    def forward(self, x):
        return self.group_norm(self.conv(x)).flip(1, 2, 3).mean(dim=[1, 2, 3])
'''

# An elementwise task with 2M outputs (compared in the worker and sampled in the evaluator) whose
# true value is zero: the fp32 result is the rounding error of x + y.
CANCELLATION = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return (x + y) - x - y


def get_inputs():
    return [torch.randn(2048, 1024), torch.randn(2048, 1024)]


def get_init_inputs():
    return []
'''

CANCELLATION_IN_FLOAT64 = '''

class ModelNew(Model):
    def forward(self, x, y):
        x, y = x.double(), y.double()
        return ((x + y) - x - y).float()
'''

# Well conditioned: a matrix product, then a ReLU.
LINEAR_RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''

IDENTITY = "\n\nclass ModelNew(Model):\n    pass\n"


def _wrong(expression: str) -> str:
    return f"\n\nclass ModelNew(Model):\n    def forward(self, *inputs):\n        return {expression}\n"


def _task(source: str, name: str):
    return task_from_source(source, task_id=f"test/L2/{name}", level=2, name=name)


@pytest.fixture(scope="module")
def permissive(cpu_evaluator):
    """The session's CPU evaluator with PyTorch ops allowed: these candidates are PyTorch code."""
    return cpu_evaluator.config.replace(policy="permissive")


@pytest.mark.parametrize("name,candidate", [("float64", IN_FLOAT64), ("reversed_order", REVERSED_ORDER)])
def test_a_correct_candidate_that_sums_otherwise_passes_on_a_noise_reference(cpu_evaluator, permissive, name,
                                                                             candidate):
    result = cpu_evaluator.evaluate(_task(GROUP_NORM_MEAN, "gn_mean"), GROUP_NORM_MEAN + candidate, config=permissive)
    assert result.ok, result.message
    tolerance = permissive.rel_norm_tolerance
    # It fails under the policy's tolerance: the reference is itself about its own norm from the truth,
    # and the candidate is about as far from the reference.
    assert all(error > 0.5 for error in result.reference_error["rel_norm"]), result.reference_error
    assert all(trial.rel_norm_error > 100 * tolerance for trial in result.trials), result.trials
    assert {"reference_rounding_noise", "degenerate_task"} <= set(result.flags)
    error = result.reference_error
    assert error["multiple"] == permissive.reference_noise_multiple
    assert error["rel_norm_tolerance"] == pytest.approx([permissive.reference_noise_multiple * e for e in error["rel_norm"]])
    assert all(a > 0 for a in error["abs_tolerance"])
    assert "reference_rounding_noise" not in result.message and "float64 twin" in result.message
    assert EvalResult.from_dict(result.to_dict()).reference_error == result.reference_error


@pytest.mark.parametrize("expression", ["super().forward(*inputs) + 1.0",  # off by far more than the noise
                                        "super().forward(*inputs) * 1000.0"])  # noise-sized, but 1000 times it
def test_a_wrong_candidate_still_fails_on_a_noise_reference(cpu_evaluator, permissive, expression):
    result = cpu_evaluator.evaluate(_task(GROUP_NORM_MEAN, "gn_mean"), GROUP_NORM_MEAN + _wrong(expression),
                                    config=permissive)
    assert result.error_code is ErrorCode.INCORRECT, result.message
    assert "widened from 5e-05 to 256 times" in result.message
    assert "reference_rounding_noise" in result.flags


def test_large_noise_outputs_get_the_floor_in_the_worker_and_in_the_sample(cpu_evaluator, permissive):
    task = _task(CANCELLATION, "cancellation")
    result = cpu_evaluator.evaluate(task, CANCELLATION + CANCELLATION_IN_FLOAT64, config=permissive)
    assert result.ok, result.message
    assert "reference_rounding_noise" in result.flags
    assert all(trial.rel_norm_error > 0.1 for trial in result.trials)  # beyond the policy's 5e-5
    wrong = cpu_evaluator.evaluate(task, CANCELLATION + _wrong("super().forward(*inputs) + 1e-3"), config=permissive)
    assert wrong.error_code is ErrorCode.INCORRECT, wrong.message


def test_a_well_conditioned_task_keeps_the_policys_tolerances(cpu_evaluator, permissive):
    task = _task(LINEAR_RELU, "linear_relu")
    result = cpu_evaluator.evaluate(task, LINEAR_RELU + IDENTITY, config=permissive)
    assert result.ok and result.message == "correct", result.message
    assert "reference_rounding_noise" not in result.flags and "degenerate_task" not in result.flags
    assert set(result.reference_error) == {"rel_norm", "max_abs", "seconds"}  # measured, nothing widened
    assert len(result.reference_error["rel_norm"]) == 5
    assert all(0 <= e < permissive.rel_norm_tolerance / 10 for e in result.reference_error["rel_norm"])
    off = cpu_evaluator.evaluate(task, LINEAR_RELU + _wrong("super().forward(*inputs) * 1.001"), config=permissive)
    assert off.error_code is ErrorCode.INCORRECT
    assert off.message.startswith("trial 0 (task inputs): output: relative error ")
    assert " > 5e-05 (fp32 policy); max abs error " in off.message and "widened" not in off.message


def _judge(config: EvalConfig, reference_error: dict | None, candidate_outputs: list[np.ndarray]) -> EvalResult:
    """A verdict from worker messages made up here: one output of 256 elements per trial."""
    rng = np.random.default_rng(0)
    references = [rng.standard_normal(256).astype(np.float32) for _ in candidate_outputs]
    spec = {"shape": [256], "dtype": "float32", "full": True}
    meta = {"distributions": ["task", "shuffled", "negated", "scaled_x3", "centered"][: len(references)],
            "outputs": [[spec] for _ in references], "timing_checksums": [], "memory": {}}
    if reference_error is not None:
        meta["reference_error"] = reference_error
    result = EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.INTERNAL_ERROR)
    judge = Judgement(config, result)
    judge.on_message(Message("reference", meta, references))
    for index, (reference, offset) in enumerate(zip(references, candidate_outputs)):
        trial = {"index": index, "outputs": [spec], "mutated_inputs": [], "recording_intact": True, "tampered": []}
        if not judge.on_message(Message("trial", trial, [reference + offset])):
            break
    return result


def test_a_well_conditioned_measurement_changes_no_verdict():
    config = EvalConfig(correctness_trials=3)
    small = [np.full(256, 1e-6, np.float32)] * 3
    off = [np.full(256, 1e-6, np.float32), np.full(256, 1e-2, np.float32), np.zeros(256, np.float32)]
    sound = {"draws": [[{"norm": 2e-7, "abs": 1e-6, "bad": 0.0}]] * 3, "skipped": "", "seconds": 0.01}
    for offsets in (small, off):
        before = _judge(config, None, offsets).to_dict()  # what a worker without the measurement sent
        after = _judge(config, sound, offsets).to_dict()
        del before["stage_seconds"], after["stage_seconds"]  # clock readings
        assert before.pop("reference_error") == {"skipped": "not measured"}
        assert after.pop("reference_error")["rel_norm"] == [2e-7] * 3
        assert before == after
    assert "relative error" in _judge(config, sound, off).message
    # The same offsets pass where the reference is measured to be rounding noise on the second draw.
    noisy = {"draws": [[{"norm": 2e-7, "abs": 1e-6, "bad": 0.0}], [{"norm": 0.5, "abs": 0.05, "bad": 3.0}],
                       [{"norm": 2e-7, "abs": 1e-6, "bad": 0.0}]], "skipped": "", "seconds": 0.01}
    widened = _judge(config, noisy, off)
    assert len(widened.trials) == 3 and all(trial.passed for trial in widened.trials), widened.message
    assert widened.reference_error["abs_tolerance"] == [None, pytest.approx(256 * 0.05), None]
    assert "reference_rounding_noise" in widened.flags


def test_the_floor_is_a_multiple_of_the_references_own_error_and_only_where_it_exceeds_the_policy():
    config = EvalConfig()
    assert tolerance_floor(None, config) is None
    assert tolerance_floor({"norm": 4e-5, "abs": 1e-6, "bad": 0.0}, config) is None
    norm_over = tolerance_floor({"norm": 1e-3, "abs": 2e-6, "bad": 0.0}, config)
    assert norm_over.rel_norm == pytest.approx(256 * 1e-3) and norm_over.abs == pytest.approx(256 * 2e-6)
    elements_over = tolerance_floor({"norm": 1e-6, "abs": 0.01, "bad": 2.0}, config)  # a few elements only
    assert elements_over.abs == pytest.approx(2.56)
    assert tolerance_floor({"norm": 1e-3, "abs": 1e-6, "bad": 0.0}, config.replace(precision="tf32")) is None
    assert tolerance_floor({"norm": 1e-2, "abs": 1e-6, "bad": 0.0}, config.replace(precision="tf32")).rel_norm == 0.04


# The linear layer's weight is a plain tensor attribute, which Module.double() does not convert:
# the float64 twin fails (float64 input, float32 weight), and the task runs under the policy's tolerances.
PLAIN_ATTRIBUTE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.randn(64, 32)

    def forward(self, x):
        return x @ self.weight


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
'''


def test_a_reference_that_fails_in_float64_keeps_the_policys_tolerances(cpu_evaluator, permissive):
    task = _task(PLAIN_ATTRIBUTE, "plain_attribute")
    result = cpu_evaluator.evaluate(task, PLAIN_ATTRIBUTE + IDENTITY, config=permissive)
    assert result.ok and result.message == "correct", result.message
    assert result.reference_error["skipped"].startswith("the reference fails in float64: RuntimeError")
    assert "reference_rounding_noise" not in result.flags
    off = cpu_evaluator.evaluate(task, PLAIN_ATTRIBUTE + _wrong("super().forward(*inputs) * 1.001"), config=permissive)
    assert off.error_code is ErrorCode.INCORRECT and " > 5e-05 (fp32 policy); " in off.message


def test_the_float64_twin_must_fit_the_memory_plan(cpu_evaluator):
    gib = 2**30
    plan = MemoryPlan(input_bytes=8 * gib, output_bytes=8 * gib, reference_extra_bytes=0, budget_bytes=72 * gib,
                      used_bytes=8 * gib, resident_outputs=3, timing_sets=0)
    fits, why = float64_twin_fits(plan, parameter_bytes=0)  # 8 + 24 + 24 + 24 + 0.4 + 4 GiB > 72
    assert not fits and "over its 72.00 GiB budget" in why
    roomy = MemoryPlan(input_bytes=gib, output_bytes=gib, reference_extra_bytes=0, budget_bytes=72 * gib,
                       used_bytes=gib, resident_outputs=5, timing_sets=3)
    assert float64_twin_fits(roomy, parameter_bytes=gib) == (True, "")
    # End to end: a budget with room for one trial has none for the twin; the verdict is unchanged.
    task = get_task("builtin/L1/gelu")
    first = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text())
    assert first.ok and len(first.reference_error["rel_norm"]) == 5, first.reference_error
    memory = first.device_memory
    budget = (2 * memory["input_gib"] + 2 * memory["output_gib"] + memory["reference_extra_gib"]
              + 0.25 * max(memory["input_gib"], memory["output_gib"]) + 0.2 * memory["output_gib"])
    # (another seed: the evaluator hands a task's earlier measurement to its later jobs, see below)
    tight = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text(),
                                   config=cpu_evaluator.config.replace(device_memory_gb=budget, seed=7))
    assert tight.ok, tight.message
    assert "float64 copy of the reference" in tight.reference_error["skipped"], tight.reference_error
    assert tight.flags == first.flags


def test_a_tasks_measurement_is_made_once_and_handed_to_its_later_jobs(cpu_evaluator, permissive):
    """The second verdict of the same task, sizes, seed, draws and precision reuses the first's float64
    measurement (no float64 forward: 0 s), with the same floors and flags; another seed or precision
    measures anew. (No baselines here, so the eval workers measure; with baselines the first baseline
    worker does, below.)"""
    task = _task(GROUP_NORM_MEAN, "gn_mean_reused")
    config = permissive.replace(seed=11, baselines=())
    first = cpu_evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64, config=config)
    again = cpu_evaluator.evaluate(task, GROUP_NORM_MEAN + REVERSED_ORDER, config=config)
    assert first.ok and again.ok, (first.message, again.message)
    assert first.reference_error["seconds"] > 0 and again.reference_error["seconds"] == 0.0
    assert again.reference_error["rel_norm"] == first.reference_error["rel_norm"]
    assert again.reference_error["rel_norm_tolerance"] == first.reference_error["rel_norm_tolerance"]
    assert {"reference_rounding_noise", "degenerate_task"} <= set(again.flags)
    wrong = cpu_evaluator.evaluate(task, GROUP_NORM_MEAN + _wrong("super().forward(*inputs) + 1.0"), config=config)
    assert wrong.error_code is ErrorCode.INCORRECT and wrong.reference_error["seconds"] == 0.0
    other = cpu_evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64, config=config.replace(seed=12))
    assert other.ok and other.reference_error["seconds"] > 0
    # the precision is part of what was measured (TF32 in the reference, the elementwise bound)
    tf32 = cpu_evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64, config=config.replace(precision="tf32"))
    assert tf32.ok and tf32.reference_error["seconds"] > 0, tf32.message


def test_the_first_baseline_worker_measures_after_its_timings_and_every_later_job_is_given_it(tmp_path, permissive):
    """With baselines, the task's first baseline worker makes the float64 measurement after its timings
    (so no timed worker runs the twin before timing) and the eval workers are given it: the first
    verdict already makes no float64 forward, with the floors and flags of a measurement made by an
    eval worker itself; a new evaluator over the same cache is given it with the cached baselines."""
    task = _task(GROUP_NORM_MEAN, "gn_mean_baseline_measured")
    config = permissive.replace(seed=13)
    with Evaluator("cpu", config, cache_dir=tmp_path / "alone") as evaluator:
        alone = evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64, config=config.replace(baselines=()))
    with Evaluator("cpu", config, cache_dir=tmp_path / "shared") as evaluator:
        first = evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64)
    assert alone.ok and first.ok, (alone.message, first.message)
    assert alone.reference_error["seconds"] > 0 and first.reference_error["seconds"] == 0.0
    assert first.reference_error["rel_norm"] == pytest.approx(alone.reference_error["rel_norm"], rel=1e-3)
    assert {"reference_rounding_noise", "degenerate_task"} <= set(first.flags) & set(alone.flags)
    with Evaluator("cpu", config, cache_dir=tmp_path / "shared") as evaluator:
        wrong = evaluator.evaluate(task, GROUP_NORM_MEAN + _wrong("super().forward(*inputs) + 1.0"))
        assert evaluator.baselines(task)["eager"] is not None  # from the cache: no baseline worker ran
    assert wrong.error_code is ErrorCode.INCORRECT and wrong.reference_error["seconds"] == 0.0
    assert wrong.reference_error["rel_norm"] == first.reference_error["rel_norm"]


def test_a_measurement_given_to_the_baseline_workers_is_kept_with_their_times(tmp_path, permissive):
    """Baseline workers given an earlier job's measurement send none of their own; the cached entry
    keeps the one they were given, so the next evaluator's eval workers are given it too."""
    task = _task(GROUP_NORM_MEAN, "gn_mean_given")
    config = permissive.replace(seed=17)
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        alone = evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64, config=config.replace(baselines=()))
        timed = evaluator.evaluate(task, GROUP_NORM_MEAN + IN_FLOAT64)
    assert alone.reference_error["seconds"] > 0 and timed.reference_error["seconds"] == 0.0
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        later = evaluator.evaluate(task, GROUP_NORM_MEAN + REVERSED_ORDER)
    assert later.ok and later.reference_error["seconds"] == 0.0, later.reference_error
    assert later.reference_error["rel_norm"] == alone.reference_error["rel_norm"]


def test_a_measurement_that_would_widen_tolerances_wrongly_is_not_kept():
    good = {"draws": [[{"norm": 1.0, "abs": 1e-7, "bad": 0.0}], [None]], "skipped": ""}
    assert complete_reference_error(good, 2)["draws"] == good["draws"]
    assert complete_reference_error(good, 3) is None  # one entry per trial
    assert complete_reference_error(dict(good, skipped="did not fit"), 2) is None
    for value in (float("nan"), float("inf"), -1.0, "x"):
        bad = {"draws": [[{"norm": value, "abs": 1e-7, "bad": 0.0}], [None]], "skipped": ""}
        assert complete_reference_error(bad, 2) is None, value
