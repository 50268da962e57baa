"""The evaluator on the CPU backend: reference solutions pass; faults get their own error code and
never spoil the next verdict."""
from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from cuda_gym.eval import ErrorCode, EvalConfig, EvalResult, Evaluator, TimingStats, milestone_reward
from cuda_gym.eval import baseline_runs, evaluator as evaluator_module
from cuda_gym.eval.config import device_time
from cuda_gym.eval.baselines import BASELINE_RETRIES, BASELINE_RETRY_S, BaselineCache, entry_serves, merge_entries
from cuda_gym.eval.baseline_runs import _workers_agree
from cuda_gym.eval.judgement import Judgement
from cuda_gym.eval.pool import run_job
from cuda_gym.eval.reward import claims_milestone
from cuda_gym.tasks import get_task, load_suite, solution_path, task_from_source

from .conftest import TEST_CONFIG
from .helpers import CORRECT_BODY, GELU_TASK, native_candidate

SOLVED = [t for t in load_suite("builtin") if solution_path(t, "cpu")]


@pytest.mark.slow
def test_every_cpu_reference_solution_passes(cpu_evaluator):
    futures = {t.id: cpu_evaluator.submit(t, solution_path(t, "cpu").read_text()) for t in SOLVED}
    failures = {}
    for task_id, future in futures.items():
        result = future.result()
        if not result.ok:
            failures[task_id] = f"{result.error_code.value}: {result.message[:300]}"
            continue
        assert result.correct and result.compiled
        assert len(result.trials) == 5 and all(t.passed for t in result.trials)
        assert {t.distribution for t in result.trials} >= {"task", "negated", "scaled_x3", "centered"}
        assert result.candidate_time.median_ms > 0 and result.eager_time.median_ms > 0
        assert result.speedup_vs_eager == pytest.approx(
            result.eager_time.median_ms / result.candidate_time.median_ms)
        assert milestone_reward(result) >= 1
    assert not failures, failures


def test_result_round_trips_through_json(cpu_evaluator):
    result = cpu_evaluator.evaluate(get_task(GELU_TASK), native_candidate(CORRECT_BODY))
    assert result.ok, result.message
    again = EvalResult.from_dict(json.loads(result.to_json()))
    assert again == result


FAULTS = {
    "wrong": (native_candidate("for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i];"), ErrorCode.INCORRECT),
    "compile_error": (native_candidate("this is not C++;"), ErrorCode.COMPILE_ERROR),
    "segfault": (native_candidate("volatile int* p = nullptr; *p = 1;"), ErrorCode.RUNTIME_ERROR),
    "abort": (native_candidate("std::abort();"), ErrorCode.RUNTIME_ERROR),
    "native_hang": (native_candidate("volatile int spin = 1; while (spin) {}"), ErrorCode.TIMEOUT),
    "python_hang": (native_candidate(CORRECT_BODY, python_forward="        while True:\n            pass\n"),
                    ErrorCode.TIMEOUT),
    "raises": (native_candidate(CORRECT_BODY, python_forward="        raise ValueError('boom')\n"),
               ErrorCode.RUNTIME_ERROR),
    "import_error": (native_candidate(CORRECT_BODY, extra="import no_such_module_xyz"), ErrorCode.RUNTIME_ERROR),
    "no_model_new": ("import torch\nclass Model(torch.nn.Module):\n    pass\n", ErrorCode.INVALID_ACTION),
    "not_python": ("def forward(:", ErrorCode.INVALID_ACTION),
    "wrong_shape": (native_candidate(CORRECT_BODY, python_forward=(
        "        y = torch.empty(x.numel(), dtype=x.dtype)\n        _lib.run(x, y, x.numel())\n        return y\n")),
        ErrorCode.INCORRECT),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_gets_its_code_and_next_verdict_is_right(cpu_evaluator, name):
    from dataclasses import replace

    source, expected = FAULTS[name]
    task = get_task(GELU_TASK)
    config = replace(cpu_evaluator.config, eval_timeout_s=15.0)
    result = cpu_evaluator.evaluate(task, source, config=config)
    assert result.error_code is expected, (result.error_code, result.message, result.runtime_log[-800:])
    assert result.message, "every failure explains itself"
    assert not result.correct and milestone_reward(result) == -1
    follow_up = cpu_evaluator.evaluate(task, native_candidate(CORRECT_BODY))
    assert follow_up.ok, follow_up.message


def test_a_wrong_candidate_ends_at_its_first_look_untimed(cpu_evaluator):
    # The first look at trial 0's draw, before the timing, decides a wrong candidate: no timed calls
    # are spent on it, and its verdict is the one trial 0 gives. A right one goes on to the timing.
    task = get_task(GELU_TASK)
    wrong = cpu_evaluator.evaluate(task, FAULTS["wrong"][0])
    assert wrong.error_code is ErrorCode.INCORRECT, wrong.message
    assert wrong.message.startswith("trial 0 ("), wrong.message
    assert "first_look" in wrong.stage_seconds and "timing" not in wrong.stage_seconds, wrong.stage_seconds
    assert wrong.candidate_time is None and len(wrong.trials) == 1 and not wrong.trials[0].passed
    right = cpu_evaluator.evaluate(task, native_candidate(CORRECT_BODY))
    assert right.ok, right.message
    assert right.stage_seconds["first_look"] < right.stage_seconds["timing"] < right.stage_seconds["trial0"]
    assert len(right.trials) == TEST_CONFIG.correctness_trials  # the first look is not counted as a trial
    # Outputs that are not tensors on the first call are judged there too, not waved on to the timing.
    none_first = task.source + (
        "\n\nclass ModelNew(Model):\n"
        "    calls = 0\n\n"
        "    def forward(self, *inputs):\n"
        "        ModelNew.calls += 1\n"
        "        return None if ModelNew.calls == 1 else super().forward(*inputs)\n")
    result = cpu_evaluator.evaluate(task, none_first, config=TEST_CONFIG.replace(policy="permissive"))
    assert result.error_code is ErrorCode.INCORRECT and "NoneType" in result.message, result.message
    assert "timing" not in result.stage_seconds, result.stage_seconds
    # A forward that overwrites its input is wrong at the first look as in a trial.
    overwrites = task.source + (
        "\n\nclass ModelNew(Model):\n"
        "    def forward(self, x):\n"
        "        return x.copy_(super().forward(x))\n")
    result = cpu_evaluator.evaluate(task, overwrites, config=TEST_CONFIG.replace(policy="permissive"))
    assert result.error_code is ErrorCode.INCORRECT, result.message
    assert result.message.startswith("trial 0 (") and "modified its input(s) [0]" in result.message, result.message


def structured_task(signature: str, body: str, inputs: str) -> str:
    return (f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, {signature}):\n"
            f"        return {body}\n\n\ndef get_inputs():\n    {inputs}\n\n\ndef get_init_inputs():\n    return []\n")


def judged(evaluator: Evaluator, source: str, forward: str | None = None) -> EvalResult:
    """The task `source` judged (permissive) with a candidate whose forward returns `forward`, or
    (None) with the reference submitted as itself."""
    signature = source.split("def forward(self, ")[1].split(")")[0]
    candidate = source + (f"\n\nclass ModelNew(Model):\n    def forward(self, {signature}):\n        return {forward}\n"
                          if forward else "\n\nclass ModelNew(Model):\n    pass\n")
    task = task_from_source(source, task_id="test/L1/custom", level=1, name="custom")
    return evaluator.evaluate(task, candidate, config=TEST_CONFIG.replace(policy="permissive"))


@pytest.mark.parametrize("source", [
    # NaN is unequal to itself: an input check by torch.equal alone called an untouched input with
    # NaN in it changed.
    structured_task("x", "torch.nan_to_num(x, nan=0.0) * 2.0",
                    "x = torch.randn(256, 64)\n    x[::7, 3] = float('nan')\n    return [x]"),
    structured_task("x", "torch.nan_to_num(x.real)",
                    "x = torch.randn(256, 64, dtype=torch.complex64)\n    x[::7, 3] = float('nan')\n    return [x]"),
    # A Python number drawn at random: each timed call's draw must reach the forward, not only its tensors.
    structured_task("x, s", "x * s", "return [torch.randn(256, 64), float(torch.rand(1))]"),
    # An output with a zero-size dimension: the worker's message signature took no such array.
    structured_task("x", "torch.nonzero(x > 100)", "return [torch.randn(256, 64)]"),
], ids=["nan_input", "complex_nan_input", "random_python_number", "empty_2d_output"])
def test_the_reference_submitted_as_itself_is_correct(cpu_evaluator, source):
    result = judged(cpu_evaluator, source)
    assert result.ok, result.message


TRIANGULAR = structured_task("A, B", "torch.triu(torch.matmul(A, B))",
                             "return [torch.triu(torch.rand(64, 64)), torch.triu(torch.rand(64, 64))]")
SYMMETRIC = structured_task("A, B", "torch.matmul(A, B)",
                            "A = torch.rand(64, 64)\n    B = torch.rand(64, 64)\n    return [(A + A.T) / 2, (B + B.T) / 2]")
HINGE = structured_task("p, t", "torch.mean(torch.clamp(1 - p * t, min=0))",
                        "return [torch.randn(4096), torch.randint(0, 2, (4096,)).float() * 2 - 1]")
FLOAT_INDEX = structured_task("x, idx", "x[:, idx.long()]",
                              "return [torch.randn(256, 64), torch.randint(0, 64, (32,)).float()]")
CHOLESKY = structured_task("A", "torch.linalg.cholesky(A)", "X = torch.randn(64, 64)\n    return [X @ X.T + 64 * torch.eye(64)]")


@pytest.mark.parametrize("source, forward", [
    # Each candidate is exact on every input its task's get_inputs() can make, and relies on it.
    (TRIANGULAR, "torch.triu(torch.matmul(A, torch.triu(B)))"),
    (SYMMETRIC, "torch.matmul(A, B.T.contiguous())"),
    (HINGE, "torch.mean(torch.clamp(torch.where(t > 0, 1 - p, 1 + p), min=0))"),
    (FLOAT_INDEX, "x.index_select(1, idx.long())"),  # a x3 draw of the indices was out of range
    (CHOLESKY, "torch.linalg.cholesky(A)"),  # a negated draw of A was not positive-definite
    # Indices made from a float generator: its negated draw gave negative indices, which the
    # reference wrapped (finite outputs) and no gather that checks its bounds matched.
    (structured_task("w, idx", "w[idx] * 2.0", "return [torch.randn(1000, 64), (torch.rand(4096) * 1000).long()]"),
     "torch.index_select(w, 0, idx) * 2.0"),
], ids=["triangular", "symmetric", "labels_pm1", "float_indices", "positive_definite", "indices_from_rand"])
def test_a_candidate_that_relies_on_what_the_tasks_inputs_are_is_correct(cpu_evaluator, source, forward):
    # The correctness draws are the task's get_inputs() again with its random values transformed
    # where they are made (draws.py): rearranging or scaling the finished inputs broke the structure
    # and gave such candidates -1.
    result = judged(cpu_evaluator, source, forward)
    assert result.ok, result.message
    assert {t.distribution for t in result.trials} >= {"task", "fresh"}, result.trials


def test_a_complex_output_is_compared_at_the_float_tolerances(cpu_evaluator):
    # Complex outputs were compared exactly, as integers are: a more accurate FFT was INCORRECT.
    source = structured_task("x", "torch.fft.fft(x)", "return [torch.randn(64, 256)]")
    result = judged(cpu_evaluator, source, "torch.fft.fft(x.double()).to(torch.complex64)")
    assert result.ok, result.message


def test_a_number_and_a_0_dim_tensor_are_one_output_in_the_trials_and_the_timed_calls(cpu_evaluator):
    # The trials took a Python float as a float32 tensor, the timed calls' digest as float64: a
    # candidate returning the 0-dim tensor of a reference's .item() passed the one, failed the other.
    result = judged(cpu_evaluator, structured_task("x", "(x * x).sum().item()", "return [torch.randn(256, 64)]"),
                    "(x * x).sum()")
    assert result.ok, result.message


def test_a_draw_the_reference_raises_on_is_replaced_by_a_plain_one(cpu_evaluator):
    # Indices made from rand(): its x3 draw is out of range, and the reference raises there.
    result = judged(cpu_evaluator, structured_task("x, idx", "x[:, idx.long()]",
                                                   "return [torch.randn(256, 64), (torch.rand(32) * 64).floor()]"))
    assert result.ok, result.message
    assert "scaled_x3" not in [t.distribution for t in result.trials], result.trials


def test_a_task_that_seeds_its_own_inputs_pays_nothing_for_speed(cpu_evaluator):
    # Every timed call of such a task gets the same inputs: a cache keyed on three elements served
    # them all, OK at 1.9x with no flag, a milestone without the work.
    source = structured_task("a, b", "a @ b", "torch.manual_seed(1234)\n    return [torch.randn(256, 256), torch.randn(256, 256)]")
    task = task_from_source(source, task_id="test/L1/seeds_itself", level=1, name="seeds_itself")
    cache = source + ("\n\nclass ModelNew(Model):\n    cache = {}\n\n    def forward(self, a, b):\n"
                      "        key = (float(a[0, 0]), float(a[3, 7]), float(b[5, 1]))\n"
                      "        if key not in ModelNew.cache:\n            ModelNew.cache[key] = a @ b\n"
                      "        return ModelNew.cache[key]\n")
    result = cpu_evaluator.evaluate(task, cache, config=TEST_CONFIG.replace(policy="permissive"))
    assert result.ok and "degenerate_task" in result.flags and "seeds itself" in result.message, result.message
    assert milestone_reward(result) == 1.0


def test_a_reference_that_changes_its_inputs_is_the_tasks_error(cpu_evaluator):
    # Submitted as itself, such a reference would be INCORRECT: the task is at fault, not a candidate.
    result = judged(cpu_evaluator, structured_task("x", "x.relu_()", "return [torch.randn(256, 64)]"))
    assert result.error_code is ErrorCode.TASK_ERROR and "modifies its input(s) [0]" in result.message, result.message


def test_a_reference_that_is_never_finite_is_the_tasks_error(cpu_evaluator):
    result = judged(cpu_evaluator, structured_task("x", "torch.log(torch.relu(x))", "return [torch.randn(256, 64)]"))
    assert result.error_code is ErrorCode.TASK_ERROR and "not finite" in result.message, result.message


def test_a_first_look_decides_only_in_its_place():
    # Before the reference's outputs arrived, or after a trial, a first look is out of order; one
    # that reports the process changed is FORBIDDEN before its outputs are compared.
    from cuda_gym.eval.protocol import Message

    def judged(meta, reference=True, trials=()):
        judge = Judgement(EvalConfig(), EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.OK))
        judge.reference = [[]] if reference else []
        judge.result.trials = list(trials)
        judge.on_message(Message("first_look", meta, []))
        return judge.result

    assert judged({"outputs": []}, reference=False).error_code is ErrorCode.FORBIDDEN
    assert judged({"outputs": []}, trials=["trial 0"]).error_code is ErrorCode.FORBIDDEN
    tampered = judged({"outputs": [], "tampered": ["torch.add replaced"]})
    assert tampered.error_code is ErrorCode.FORBIDDEN and "torch.add replaced" in tampered.message


def test_compile_error_reports_the_compiler_message(cpu_evaluator):
    result = cpu_evaluator.evaluate(get_task(GELU_TASK), native_candidate("int x = undeclared_name;"))
    assert result.error_code is ErrorCode.COMPILE_ERROR
    assert "undeclared_name" in result.compile_log


@pytest.mark.slow
def test_unchanged_candidate_is_not_rebuilt(cpu_evaluator):
    source = native_candidate(CORRECT_BODY + "\n// cache probe")
    first = cpu_evaluator.evaluate(get_task(GELU_TASK), source)
    second = cpu_evaluator.evaluate(get_task(GELU_TASK), source)
    assert first.ok and second.ok
    assert second.build_cached and second.compile_seconds == 0.0


@pytest.mark.slow
def test_submit_returns_futures_that_overlap(cpu_evaluator):
    task = get_task(GELU_TASK)
    futures = [cpu_evaluator.submit(task, native_candidate(CORRECT_BODY + f"\n// variant {i}")) for i in range(3)]
    assert all(f.result().ok for f in futures)


@pytest.mark.slow
def test_kernelbench_load_inline_candidate_is_accepted(cpu_evaluator):
    source = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor gelu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) out[i] = 0.5f * in[i] * (1.0f + std::erf(in[i] * 0.70710678118654752f));
    return y;
}
"""
gelu = load_inline(name="gelu_kb_test", cpp_sources=[cpp_source], functions=["gelu_forward"], verbose=False)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return gelu.gelu_forward(x)
'''
    name = f"gelu_kb_test_{uuid.uuid4().hex[:8]}"
    result = cpu_evaluator.evaluate(get_task(GELU_TASK), source.replace("gelu_kb_test", name))
    assert result.ok, (result.message, result.compile_log[-1000:])
    assert result.forbidden_ops == []
    # The eval worker loads the build worker's extension; it neither builds it again nor uses
    # torch's default build directory (a first GPU run showed both).
    from torch.utils.cpp_extension import get_default_build_root

    assert not (Path(get_default_build_root()) / name).exists()
    builds = list((cpu_evaluator.cache_dir / "inline").glob(f"*/{name}/.ninja_log"))
    assert len(builds) == 1
    outputs = [line.split("\t")[3] for line in builds[0].read_text().splitlines()[1:]]
    assert len(outputs) == len(set(outputs)), f"a step was built twice: {outputs}"


@pytest.mark.slow
def test_baseline_keeps_the_median_of_several_workers(tmp_path):
    # The candidate is timed in one worker: the fastest of several baseline workers would put the
    # reference, submitted as its own candidate, below 1.00x. (No agreement: all three run.)
    config = TEST_CONFIG.replace(baseline_workers=3, baseline_agreement=0.0)
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        times = evaluator.baselines(get_task(GELU_TASK))
    entries = json.loads((tmp_path / "baselines.json").read_text())
    (entry,) = entries.values()
    medians = entry["eager_worker_medians_ms"]
    assert len(medians) == 3 and all(m > 0 for m in medians)
    assert times["eager"].median_ms == sorted(medians)[1]
    # Each worker's wall time, split by phase, is kept beside the times.
    walls = times["worker_wall_s"]
    assert len(walls) == 3 and walls == entry["worker_wall_s"]
    for wall in walls:
        assert {"settle", "job", "setup", "reference_history", "eager_timing"} <= set(wall)
        assert wall["job"] >= wall["eager_timing"] > 0


def test_a_timing_is_device_bound_only_when_held_and_issued_well_within_its_device_time():
    config = EvalConfig()
    held = {"held_device_ms": 2.0, "held_issue_ms": 0.2, "open_ms": 2.1, "open_issue_ms": 0.2}
    assert config.device_bound("cuda_event_held", held)
    assert not config.device_bound("cuda_event_held", held | {"held_issue_ms": 1.2})  # issue > half the device time
    assert not config.device_bound("cuda_event", held)  # the open median stood: the host was in the way
    assert not config.device_bound("wall+device_sync", held)
    assert not config.device_bound("cuda_event_held", {}) and not config.device_bound(None, None)
    assert not config.replace(device_bound_issue_ratio=0.0).device_bound("cuda_event_held", held)  # off
    # The host pairing's rule (config.PAIRING_ISSUE_RATIO): device time whenever the issue fits within it.
    assert device_time("cuda_event_held", held | {"held_issue_ms": 1.2})
    assert not device_time("cuda_event_held", held | {"held_issue_ms": 2.2})
    assert not device_time("cuda_event", held)
    with pytest.raises(ValueError):
        EvalConfig(device_bound_issue_ratio=1.5)


def test_a_device_bound_baseline_is_timed_in_one_worker(tmp_path, monkeypatch):
    # CPU times are never device-bound; the rule's outcome is forced to see the evaluator follow it.
    monkeypatch.setattr(EvalConfig, "device_bound", lambda self, method, detail: True)
    config = TEST_CONFIG.replace(baseline_workers=3, baseline_agreement=0.0)
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        times = evaluator.baselines(get_task(GELU_TASK))
    (entry,) = json.loads((tmp_path / "baselines.json").read_text()).values()
    assert len(entry["eager_worker_medians_ms"]) == 1 and len(times["worker_wall_s"]) == 1
    assert times["eager"].median_ms == entry["eager_worker_medians_ms"][0]


@pytest.mark.slow
def test_the_third_baseline_worker_runs_only_when_the_first_two_disagree(tmp_path, monkeypatch):
    def stats(ms):
        return {"median_ms": ms}

    config = EvalConfig(baseline_agreement=0.02)

    def agree(samples, ratios=()):
        return _workers_agree(samples, list(ratios), config)

    assert agree({"eager": [stats(1.0), stats(1.019)], "compile": [stats(2.0), stats(1.98)]})
    assert not agree({"eager": [stats(1.0), stats(1.021)], "compile": [stats(2.0), stats(2.0)]})
    assert not agree({"eager": [stats(1.0)], "compile": [stats(2.0), stats(2.0)]})  # one failed
    assert not agree({"eager": [stats(1.0), stats(float("nan"))]})
    # Where both workers paired compile with eager, the speedup vs compile is bridged through their
    # ratios, so the ratios stand for compile's medians; eager's medians always count.
    compile_apart = {"eager": [stats(1.0), stats(1.01)], "compile": [stats(2.0), stats(3.0)]}
    assert agree(compile_apart, [0.5, 0.505])
    assert not agree(compile_apart, [0.5, 0.52])
    assert not agree(compile_apart, [0.5])  # one worker's pairing was skipped: compile's medians count
    assert not agree({"eager": [stats(1.0), stats(1.5)], "compile": [stats(2.0), stats(2.0)]}, [0.5, 0.5])
    # End to end, with the agreement decided here (CPU workers' medians can differ two-fold): two
    # workers when they agree, and the lower kept (never in a candidate's favour).
    seen = []
    monkeypatch.setattr(baseline_runs, "_workers_agree",
                        lambda samples, ratios, cfg: seen.append(len(samples["eager"])) or True)
    with Evaluator("cpu", TEST_CONFIG.replace(baseline_workers=3), cache_dir=tmp_path) as ev:
        times = ev.baselines(get_task(GELU_TASK))
    (entry,) = json.loads((tmp_path / "baselines.json").read_text()).values()
    medians = entry["eager_worker_medians_ms"]
    assert seen == [2] and len(medians) == 2 and times["eager"].median_ms == min(medians)


def test_a_re_measured_baseline_entry_keeps_and_replaces_per_name():
    old = {"eager": {"median_ms": 1.0}, "profiles": {"eager": [{"name": "k"}]}, "errors": {"compile": "failed"}}
    new = {"compile": {"median_ms": 2.0}, "profiles": {"compile": "no CUDA kernel ran"}, "errors": {}}
    merged = merge_entries(old, new)
    assert merged["eager"] == {"median_ms": 1.0} and merged["compile"] == {"median_ms": 2.0}
    assert merged["profiles"] == {"eager": [{"name": "k"}], "compile": "no CUDA kernel ran"}
    assert merged["errors"] == {}  # compile measured again: its old error is gone
    # the float64 measurements, one per seed and number of draws, are kept beside the new ones
    seeded = merge_entries({"reference_errors": {"seed 0": "a", "seed 1": "b"}}, {"reference_errors": {"seed 1": "c"}})
    assert seeded["reference_errors"] == {"seed 0": "a", "seed 1": "c"}


def test_a_baseline_whose_workers_timed_out_is_measured_again_later_a_few_times(tmp_path, monkeypatch):
    # Such a failure may be transient (a worker killed or timed out under load): cached for good, it
    # would cap every later candidate's reward on the task.
    path = tmp_path / "baselines.json"
    cache, start = BaselineCache(path), time.time()
    timed_out = {"eager": None, "errors": {"eager": "timed out after 600 s"}, "failed_at": [start]}
    assert cache.get("k", lambda: timed_out, ("eager",)) == timed_out
    assert cache.get("k", lambda: pytest.fail("measured again within BASELINE_RETRY_S"), ("eager",)) == timed_out
    monkeypatch.setattr(time, "time", lambda: start + BASELINE_RETRY_S + 1)
    assert not cache.cached("k", ("eager",)) and not BaselineCache(path).cached("k", ("eager",))
    second = start + BASELINE_RETRY_S + 1
    assert cache.get("k", lambda: dict(timed_out, failed_at=[second]), ("eager",))["failed_at"] == [start, second]
    monkeypatch.setattr(time, "time", lambda: second + 1.5 * BASELINE_RETRY_S)
    assert cache.cached("k", ("eager",)), "the wait doubles after a second failure in a row"
    monkeypatch.setattr(time, "time", lambda: second + 2 * BASELINE_RETRY_S + 1)
    measured = cache.get("k", lambda: {"eager": {"median_ms": 1.0}, "errors": {}}, ("eager",))
    assert measured == {"eager": {"median_ms": 1.0}, "errors": {}}  # the error and its times are gone
    assert BaselineCache(path).cached("k", ("eager",))
    # A failed measurement never replaces a measured time.
    assert merge_entries(measured, timed_out) == measured
    # Final: after BASELINE_RETRIES retries; a failure the worker reported; an entry cached before retries.
    given_up = [start + i for i in range(BASELINE_RETRIES + 1)]
    assert entry_serves({"eager": None, "failed_at": given_up}, ("eager",), now=start + 10 ** 9)
    assert entry_serves({"eager": None, "errors": {"eager": "torch.compile raised"}}, ("eager",))
    reported = merge_entries(timed_out, {"eager": None, "errors": {"eager": "the reference raised"}})
    assert "failed_at" not in reported and entry_serves(reported, ("eager",))


HANGING_TASK = '''
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep(3600)
        return x


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''


def test_a_reference_that_hangs_costs_one_baseline_timeout_not_one_per_worker(tmp_path, monkeypatch):
    jobs = []

    def counting_run_job(worker, job, *args, **kwargs):
        jobs.append(worker.spec.role)
        return run_job(worker, job, *args, **kwargs)

    monkeypatch.setattr(baseline_runs, "run_job", counting_run_job)
    task = task_from_source(HANGING_TASK, task_id="test/L1/hangs", level=1, name="hangs")
    config = TEST_CONFIG.replace(baseline_workers=3, baseline_timeout_s=5.0)
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        times = evaluator.baselines(task)
    assert times["eager"] is None and "timed out" in times["errors"]["eager"]
    assert jobs.count("baseline") == 1, jobs
    (entry,) = json.loads((tmp_path / "baselines.json").read_text()).values()
    assert len(entry["failed_at"]) == 1  # measured again after BASELINE_RETRY_S


def test_a_reference_that_hangs_in_set_up_is_the_tasks_error_not_the_candidates(cpu_evaluator):
    # No candidate code is in the worker while the reference runs on every draw: a timeout there
    # is not the candidate's TIMEOUT (-1 to a policy).
    task = task_from_source(HANGING_TASK, task_id="test/L1/hangs", level=1, name="hangs")
    config = TEST_CONFIG.replace(baselines=(), eval_timeout_s=3.0, policy="permissive")
    result = cpu_evaluator.evaluate(task, HANGING_TASK + "\n\nclass ModelNew(Model):\n    pass\n", config=config)
    assert result.error_code is ErrorCode.TASK_ERROR and "set-up" in result.message, result.message


NO_COMPILE_TASK = '''
import torch
import torch.nn as nn


@torch.library.custom_op("cuda_gym_test::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:  # no fake kernel: torch.compile cannot trace it
    return x * 2


class Model(nn.Module):
    def forward(self, x):
        return double(x) + 1


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''


def test_a_reference_torch_compile_cannot_trace_keeps_its_eager_time(tmp_path):
    task = task_from_source(NO_COMPILE_TASK, task_id="test/L1/no_compile", level=1, name="no_compile")
    with Evaluator("cpu", TEST_CONFIG.replace(baselines=("eager", "compile")), cache_dir=tmp_path) as evaluator:
        times = evaluator.baselines(task)
    assert times["eager"] is not None and times["eager"].median_ms > 0, times["errors"]
    assert times["compile"] is None
    assert "torch.compile of the reference raised" in times["errors"]["compile"], times["errors"]
    (entry,) = json.loads((tmp_path / "baselines.json").read_text()).values()
    assert "failed_at" not in entry and "eager" not in entry["errors"]  # final: torch.compile will raise again


IDENTITY = "\n\nclass ModelNew(Model):\n    pass\n"
# Exact call counts: one warm-up and four timed calls, then one paired warm-up, then the pairs.
PAIRED = dict(host_pairing=("cpu",), policy="permissive", timing_warmup_s=0.0, timing_budget_s=0.0,
              warmup_reps=1, timing_reps=4, timing_min_reps=4)


@pytest.mark.slow
def test_host_pairing_times_the_candidate_against_the_reference_in_its_own_worker(cpu_evaluator, wide_pairing_band):
    # EvalConfig.host_pairing: the speedup vs eager is the median per-pair ratio, measured in the
    # candidate's worker against a fresh reference; the identity comes out near 1.00.
    task = get_task(GELU_TASK)
    config = cpu_evaluator.config.replace(**PAIRED)
    result = cpu_evaluator.evaluate(task, task.source + IDENTITY, config=config)
    assert result.ok, result.message
    pairing = result.host_pairing
    assert pairing["pairs"] >= 40 and pairing["candidate_ms"] > 0 and pairing["reference_ms"] > 0
    assert 0.75 < pairing["ratio"] < 1.33
    assert result.speedup_vs_eager == pytest.approx(pairing["ratio"])
    assert result.compared_candidate_ms() == pytest.approx(result.eager_time.median_ms / pairing["ratio"])
    assert EvalResult.from_dict(result.to_dict()).host_pairing == pairing
    plain = cpu_evaluator.evaluate(task, task.source + IDENTITY,
                                   config=cpu_evaluator.config.replace(policy="permissive"))
    assert plain.ok and plain.host_pairing == {}  # the default pairs CUDA timings only
    assert plain.speedup_vs_eager == pytest.approx(plain.eager_time.median_ms / plain.candidate_time.median_ms)


def test_a_pairing_outside_the_two_fold_band_sets_no_speedup():
    # The worker's paired medians are checked against the candidate's own timing and the eager
    # baseline; where either is more than 2x off (a process slow throughout, or a reference slowed
    # in the paired calls only), the pairing is skipped, and its ratio must not set the speedup.
    def stats(ms: float) -> TimingStats:
        return TimingStats(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, reps=10, method="wall")

    result = EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.OK, candidate_time=stats(1.0),
                        eager_time=stats(1.0))
    judge = Judgement(EvalConfig(host_pairing=("cpu",)), result)
    # 40 pairs, each the candidate at 1 ms and the reference at 3 ms, both outputs alike.
    import torch

    from cuda_gym.eval import output_digest

    digest = output_digest.DigestMaker(7)
    outputs = [digest([torch.full((4,), float(i))], i) for i in range(40)]
    judge.pairing = {"pairs": [[i, 1.0, 3.0] for i in range(40)], "candidate_inputs": list(range(40)),
                     "reference_inputs": list(range(40)), "audit": {}}
    judge._arrays["pairing"] = outputs + outputs
    judge._on_pairing()
    assert not judge.decided
    assert "beyond 2x of the eager baseline" in result.host_pairing["skipped"]
    assert "ratio" not in result.host_pairing and result.host_pairing["measured"]["ratio"] == pytest.approx(3.0)
    assert result.compared_candidate_ms() == 1.0  # the candidate's own median, not 1 ms / 3
    # And a skipped pairing's ratio is never used, whatever the dictionary holds.
    result.host_pairing = {"skipped": "why", "ratio": 3.0}
    assert result.compared_candidate_ms() == 1.0


@pytest.mark.slow
def test_the_compile_speedup_of_a_paired_timing_is_bridged_through_eager(cpu_evaluator, wide_pairing_band):
    # The baseline workers pair torch.compile with eager call by call; the speedup vs compile is the
    # (paired) speedup vs eager over that ratio, not a comparison of times from two processes.
    task = get_task(GELU_TASK)
    config = cpu_evaluator.config.replace(**PAIRED, baselines=("eager", "compile"))
    result = cpu_evaluator.evaluate(task, task.source + IDENTITY, config=config)
    assert result.ok, result.message
    eager_over_compile = result.compile_pairing["eager_over_compile"]
    assert eager_over_compile > 0 and result.host_pairing["ratio"] > 0
    assert result.speedup_vs_compile == pytest.approx(result.speedup_vs_eager / eager_over_compile)
    entry = cpu_evaluator.baselines(task, config=config)
    assert entry["compile_pairing"] == result.compile_pairing and entry["compile_pairings"][0]["pairs"] >= 40


@pytest.mark.slow
def test_of_two_workers_paired_ratios_the_one_less_favourable_to_candidates_is_kept(tmp_path, monkeypatch):
    # The speedup vs compile is the speedup vs eager over eager's ratio to compile: of two workers'
    # ratios the higher is kept (compile the faster), as the lower of two times is.
    monkeypatch.setattr(baseline_runs, "_workers_agree", lambda samples, ratios, cfg: len(ratios) == 2)
    config = TEST_CONFIG.replace(**PAIRED, baselines=("eager", "compile"), baseline_workers=3)
    with Evaluator("cpu", config, cache_dir=tmp_path) as evaluator:
        entry = evaluator.baselines(get_task(GELU_TASK))
    ratios = [pairing["eager_over_compile"] for pairing in entry["compile_pairings"]]
    assert len(ratios) == 2 and entry["compile_pairing"]["eager_over_compile"] == max(ratios)


@pytest.mark.slow
def test_a_candidate_wrong_only_while_paired_with_the_reference_is_incorrect(cpu_evaluator):
    task = get_task(GELU_TASK)
    source = task.source + """

class ModelNew(Model):
    calls = 0

    def forward(self, *args):
        n = ModelNew.calls
        ModelNew.calls += 1
        out = super().forward(*args)
        return out * 2 if 6 <= n < 12 else out  # calls 6-11 are the first paired ones
"""
    result = cpu_evaluator.evaluate(task, source, config=cpu_evaluator.config.replace(**PAIRED))
    assert result.error_code is ErrorCode.INCORRECT, result.message
    assert "paired timing" in result.message


def test_a_candidate_that_could_slow_the_paired_reference_loses_the_pairing(cpu_evaluator):
    # A global module hook would run inside the reference's timed calls: the pairing is skipped and
    # the unpaired speedup (cached baseline over the candidate's own time) stands.
    task = get_task(GELU_TASK)
    source = task.source + "\ntorch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)\n" + IDENTITY
    result = cpu_evaluator.evaluate(task, source, config=cpu_evaluator.config.replace(**PAIRED))
    assert result.ok, result.message
    assert "global module hooks" in result.host_pairing["skipped"]
    assert result.speedup_vs_eager == pytest.approx(result.eager_time.median_ms / result.candidate_time.median_ms)


REFERENCE_CLASS = ("for _cls in torch.nn.Module.__subclasses__():\n"
                   "    if _cls.__name__ == 'Model' and _cls is not Model:\n"
                   "        _reference_class = _cls  # the task's own Model, reached without gc\n")


def test_a_candidate_that_starts_a_process_loses_the_pairing(cpu_evaluator):
    task = get_task(GELU_TASK)
    change = "import subprocess\n_child = subprocess.Popen(['sleep', '60'])\n"
    result = cpu_evaluator.evaluate(task, task.source + "\n" + change + IDENTITY,
                                    config=cpu_evaluator.config.replace(**PAIRED))
    assert result.ok, result.message
    assert "child processes" in result.host_pairing["skipped"]


@pytest.mark.parametrize("change, named", [
    (REFERENCE_CLASS + "_reference_class.slow_down = True\n", "Model.slow_down"),
    (REFERENCE_CLASS + "_reference_class.forward.__globals__['_planted'] = 1\n", "the task's namespace: _planted"),
])
def test_a_candidate_that_patches_the_reference_class_or_its_globals_is_forbidden(cpu_evaluator, change, named):
    # The task's namespace and the classes it defines are the judge's: the timed draws, the
    # reference's forward and the paired reference read them (TamperCheck watches them).
    task = get_task(GELU_TASK)
    result = cpu_evaluator.evaluate(task, task.source + "\n" + change + IDENTITY,
                                    config=cpu_evaluator.config.replace(**PAIRED))
    assert result.error_code is ErrorCode.FORBIDDEN, result.message
    assert named in result.message


def test_speedup_is_the_cached_eager_baseline_over_the_candidates_time(cpu_evaluator):
    task = get_task(GELU_TASK)
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text())
    assert result.ok, result.message
    assert result.speedup_vs_eager == pytest.approx(result.eager_time.median_ms / result.candidate_time.median_ms)
    assert "reference.checksums" in result.stage_seconds  # the reference ran untimed in the worker


def test_speedups_compare_with_the_cached_baselines():
    def stats(ms):
        return TimingStats(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, reps=10, method="cuda_event")

    result = EvalResult(task_id="t", backend="cuda", error_code=ErrorCode.OK, correct=True,
                        candidate_time=stats(1.0), eager_time=stats(2.0), compile_time=stats(1.5))
    Evaluator._set_speedups(result, EvalConfig())
    assert result.baseline_ms() == {"eager": 2.0, "compile": 1.5}
    assert result.speedup_vs_eager == pytest.approx(2.0)
    assert result.speedup_vs_compile == pytest.approx(1.5)
    checked = EvalResult(task_id="t", backend="cuda", error_code=ErrorCode.OK, candidate_time=stats(1.0),
                         eager_time=stats(2.5))
    Evaluator._set_speedups(checked, EvalConfig(baselines=()))
    assert checked.speedup_vs_eager is None and checked.speedup_vs_compile is None  # `#! check`: no speedups


@pytest.mark.slow
def test_a_full_length_timing_with_audits_keeps_the_worker_alive(cpu_evaluator):
    """50 timed repeats with the op recorder's audits, as the default config times, in the eval
    worker and the baseline worker (with the collector off across audited calls, the recorder's
    objects piled up and both workers died of SIGSEGV on builtin/L3/mlp)."""
    task = get_task("builtin/L3/mlp")
    # All 50 repeats whatever the machine's load (the 1 s budget would stop a loaded machine at 10).
    config = EvalConfig(baselines=("eager",), baseline_workers=1, eval_timeout_s=300.0, seed=11, confirm_faster=False,
                        timing_min_reps=50)
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text(), config=config)
    assert result.ok, (result.message, result.runtime_log[-500:])
    assert result.candidate_time.reps >= 30 and result.eager_time is not None
    assert not [flag for flag in result.flags if flag.startswith("baseline_")], result.runtime_log[-500:]


@pytest.mark.slow
def test_both_baselines_are_measured_with_the_default_config(cpu_evaluator):
    """The compile baseline's first call imports inductor, whose frame lookups the tamper check's
    tripwire denies: it is compiled before the check is armed (else every baseline worker failed)."""
    task = get_task("builtin/L1/gelu")
    config = EvalConfig(baseline_workers=1, eval_timeout_s=120.0, seed=12, confirm_faster=False)
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text(), config=config)
    assert result.ok, result.message
    assert result.eager_time is not None and result.compile_time is not None, result.runtime_log[-500:]
    assert result.speedup_vs_compile is not None


def test_a_permissive_candidate_may_use_torch_compile(cpu_evaluator):
    """KernelBench allows torch.compile under its (our permissive) rules: the candidate's first
    compile imports inductor, whose frame lookups the tripwire would deny in code it did not know
    when armed, so the worker loads inductor first when the source mentions it (else FORBIDDEN)."""
    task = get_task("builtin/L1/gelu")
    source = task.source + (
        "\n\nclass ModelNew(Model):\n"
        "    def __init__(self, *args):\n"
        "        super().__init__(*args)\n"
        "        self.compiled = torch.compile(super().forward)\n\n"
        "    def forward(self, *inputs):\n"
        "        return self.compiled(*inputs)\n")
    config = EvalConfig(policy="permissive", baselines=(), eval_timeout_s=300.0, seed=13)
    result = cpu_evaluator.evaluate(task, source, config=config)
    assert result.ok, (result.error_code, result.message)


def _timed(ms, method="wall"):
    return TimingStats(median_ms=ms, min_ms=ms, max_ms=ms, iqr_ms=0.0, reps=10, method=method)


def test_only_a_claimed_milestone_is_confirmed():
    def result(eager, compile_=None):
        return EvalResult(task_id="t", backend="cuda", error_code=ErrorCode.OK, correct=True,
                          candidate_time=_timed(1.0), speedup_vs_eager=eager, speedup_vs_compile=compile_)

    assert claims_milestone(result(1.06))
    assert claims_milestone(result(0.9, 1.06))
    assert not claims_milestone(result(1.04, 1.05))  # no milestone at stake
    assert not claims_milestone(result(None))


def _confirm_with(second_verdict):
    """Evaluator._confirm with the second worker's verdict given: (result, what the judge was called with)."""
    calls = []

    def judge(task, candidate, backend, config, env, result):
        calls.append(result)
        second_verdict(result)

    evaluator = type("FakeEvaluator", (), {"_judge": staticmethod(judge), "_set_speedups": staticmethod(Evaluator._set_speedups)})()
    before = EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.INTERNAL_ERROR, eager_time=_timed(2.0),
                        compiled=True)
    first = EvalResult(task_id="t", backend="cpu", error_code=ErrorCode.OK, correct=True, eager_time=_timed(2.0),
                       compiled=True, candidate_time=_timed(1.0), eval_seconds=1.5, flags=["first_only"])
    Evaluator._set_speedups(first, EvalConfig(baselines=("eager",)))
    Evaluator._confirm(evaluator, None, None, "cpu", EvalConfig(baselines=("eager",)), {}, first, before)
    return first, calls


def test_the_slower_of_two_workers_stands_when_a_milestone_is_confirmed():
    def slower(result):
        result.error_code, result.correct, result.candidate_time, result.eval_seconds = ErrorCode.OK, True, _timed(1.8), 2.0
        result.flags = ["second_only"]

    result, calls = _confirm_with(slower)
    assert len(calls) == 1 and result.ok
    assert result.candidate_worker_medians_ms == [1.0, 1.8]
    assert result.candidate_time.median_ms == 1.8 and result.speedup_vs_eager == pytest.approx(2.0 / 1.8)
    assert milestone_reward(result) == 2.0 and result.eval_seconds == pytest.approx(3.5)
    assert result.flags == ["second_only", "other_worker:first_only"]  # the kept worker's, then the other's

    def faster(result):
        result.error_code, result.correct, result.candidate_time, result.eval_seconds = ErrorCode.OK, True, _timed(0.5), 2.0

    result, _ = _confirm_with(faster)  # a luckier second process gains nothing either
    assert result.candidate_time.median_ms == 1.0 and result.speedup_vs_eager == pytest.approx(2.0)
    assert result.candidate_worker_medians_ms == [1.0, 0.5]


def test_a_candidate_that_fails_in_the_confirmation_worker_gets_that_verdict():
    def wrong(result):
        result.error_code, result.correct, result.message = ErrorCode.INCORRECT, False, "trial 2: relative error 0.3"

    result, _ = _confirm_with(wrong)
    assert result.error_code is ErrorCode.INCORRECT and not result.correct
    assert milestone_reward(result) == -1.0
    assert result.candidate_worker_medians_ms == [1.0] and result.flags == ["other_worker:first_only"]
    assert result.message.startswith("correct in a first worker (1 ms, x2.00 vs eager), then in the confirmation worker:")
    assert result.message.endswith("trial 2: relative error 0.3")
    assert result.compiled and result.eager_time.median_ms == 2.0  # what the build and baselines gave stays


def test_a_confirmed_milestone_runs_a_second_fresh_worker(cpu_evaluator, monkeypatch):
    # End to end: the claim is forced (whether a CPU identity comes out 5% fast is chance).
    monkeypatch.setattr(evaluator_module, "claims_milestone", lambda result: True)
    task = get_task(GELU_TASK)
    config = cpu_evaluator.config.replace(confirm_faster=True, policy="permissive")
    result = cpu_evaluator.evaluate(task, task.source + "\n\nclass ModelNew(Model):\n    pass\n", config=config)
    assert result.ok, result.message
    medians = result.candidate_worker_medians_ms
    assert len(medians) == 2 and all(m > 0 for m in medians)
    assert result.candidate_time.median_ms == max(medians)
    assert result.speedup_vs_eager == pytest.approx(result.eager_time.median_ms / max(medians))
    assert EvalResult.from_dict(result.to_dict()).candidate_worker_medians_ms == medians
    plain = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text())  # TEST_CONFIG: off
    assert plain.ok and plain.candidate_worker_medians_ms == []


def test_an_evaluator_error_in_the_confirmation_earns_nothing():
    def broken(result):
        raise BrokenPipeError("the spare died before it took the job")

    result, _ = _confirm_with(broken)
    assert result.error_code is ErrorCode.INTERNAL_ERROR and not result.correct
    assert result.speedup_vs_eager is None and milestone_reward(result) == -1.0
    assert "BrokenPipeError" in result.message and result.message.startswith("correct in a first worker")


def test_an_evaluator_error_after_a_correct_judgement_is_not_rewarded(monkeypatch):
    def judged_then_broken(self, task, action, backend, config, result):
        result.error_code, result.correct, result.speedup_vs_eager = ErrorCode.OK, True, 2.0
        raise RuntimeError("late evaluator bug")

    monkeypatch.setattr(Evaluator, "_evaluate", judged_then_broken)
    evaluator = Evaluator.__new__(Evaluator)  # no workers: only _evaluate_safely's handling is under test
    evaluator.torch_version = "x"
    result = evaluator._evaluate_safely(get_task(GELU_TASK), "", "cpu", EvalConfig())
    assert result.error_code is ErrorCode.INTERNAL_ERROR and not result.correct and result.speedup_vs_eager is None
    assert milestone_reward(result) == -1.0


def test_no_claim_no_second_worker(cpu_evaluator, monkeypatch):
    judged = []
    original = Evaluator._judge
    monkeypatch.setattr(Evaluator, "_judge",
                        lambda self, *args, **kwargs: judged.append(1) or original(self, *args, **kwargs))
    monkeypatch.setattr(evaluator_module, "claims_milestone", lambda result: False)
    task = get_task(GELU_TASK)
    config = cpu_evaluator.config.replace(confirm_faster=True)
    source = native_candidate(CORRECT_BODY)
    result = cpu_evaluator.evaluate(task, source, config=config)
    assert result.ok, result.message
    assert judged == [1] and result.candidate_worker_medians_ms == []
    monkeypatch.setattr(evaluator_module, "claims_milestone", lambda result: True)
    again = cpu_evaluator.evaluate(task, source, config=config)
    assert again.ok and judged == [1, 1, 1] and len(again.candidate_worker_medians_ms) == 2
    # A device-bound claim is not judged again: the host cannot move its time.
    monkeypatch.setattr(EvalConfig, "device_bound", lambda self, method, detail: True)
    held = cpu_evaluator.evaluate(task, source, config=config)
    assert held.ok and judged == [1, 1, 1, 1] and held.candidate_worker_medians_ms == []


PAIRED_CALL = """

class ModelNew(Model):
    calls = 0

    def forward(self, *args):
        n = ModelNew.calls
        ModelNew.calls += 1
        if n == 7:  # a paired call (see PAIRED)
{action}
        return super().forward(*args)
"""


@pytest.mark.parametrize("source, code, named", [
    ("import random\nrandom.SystemRandom = random.Random\n" + IDENTITY, ErrorCode.FORBIDDEN, "random.SystemRandom"),
    ("import statistics\nstatistics.median = min\n" + IDENTITY, ErrorCode.FORBIDDEN, "statistics.median"),
    (PAIRED_CALL.format(action="            torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)"),
     ErrorCode.FORBIDDEN, "while it was timed against the reference"),
    # A global switch flipped in one paired call (and left so) would reach the reference's next call.
    (PAIRED_CALL.format(action="            torch.backends.mkldnn.enabled = False"), ErrorCode.FORBIDDEN,
     "global switches: torch._C._get_mkldnn_enabled (True -> False)"),
])
@pytest.mark.slow
def test_a_candidate_that_tampers_with_its_paired_timing_is_forbidden(cpu_evaluator, source, code, named):
    task = get_task(GELU_TASK)
    result = cpu_evaluator.evaluate(task, task.source + "\n" + source, config=cpu_evaluator.config.replace(**PAIRED))
    assert result.error_code is code, result.message
    assert named in result.message


@pytest.mark.slow
def test_re_pointing_the_inputs_it_was_given_changes_nothing_the_judge_uses(cpu_evaluator):
    # Each call gets new tensor objects on the live inputs' storage (timing.handles): set_ on one of
    # them re-points that object alone, so the judge's inputs, the paired reference's included,
    # keep their layout and values.
    task = get_task(GELU_TASK)
    source = PAIRED_CALL.format(action="            args[0].set_(args[0].clone())")
    result = cpu_evaluator.evaluate(task, task.source + "\n" + source, config=cpu_evaluator.config.replace(**PAIRED))
    assert result.ok, result.message
    assert "layout" not in str(result.host_pairing)



def test_cuda_builds_yield_the_cpu_and_cpu_builds_do_not(cpu_evaluator):
    # A CUDA build must not take a core from a model being timed; a CPU-backend build must not
    # starve behind timed models that use every core (its compile timeout is wall-clock).
    assert cpu_evaluator._setup.spec("build", "cuda", TEST_CONFIG, {}).yield_cpu
    assert not cpu_evaluator._setup.spec("build", "cpu", TEST_CONFIG, {}).yield_cpu
    assert not any(cpu_evaluator._setup.spec(role, "cuda", TEST_CONFIG, {}).yield_cpu for role in ("eval", "baseline"))


def test_workers_that_prepare_during_jobs_judge_as_spares_do(cache_dir):
    # Evaluator(prepare_during_jobs=True): each eval worker readies the device only when its job
    # arrives, and the next one starts while a job runs. The verdicts are those of warm spares.
    task = get_task(GELU_TASK)
    with Evaluator("cpu", TEST_CONFIG, cache_dir=cache_dir, prepare_during_jobs=True) as evaluator:
        right = evaluator.submit(task, native_candidate(CORRECT_BODY))
        wrong = evaluator.submit(task, native_candidate(CORRECT_BODY.replace("0.5f *", "0.49f *")))
        right, wrong = right.result(), wrong.result()
        spares = [w for stock in evaluator._pool._spares.values() for w in stock if w.spec.role == "eval"]
    assert right.ok, (right.message, right.runtime_log[-800:])
    assert wrong.error_code is ErrorCode.INCORRECT, (wrong.error_code, wrong.message)
    assert spares and all(w.spec.defer_device for w in spares), "the next worker was started during the job"
