"""The memory plan: a task sized past the budget still gets a correct verdict, a task that cannot fit
gets TASK_ERROR with its numbers, freed reference outputs are scrubbed, and out-of-memory failures
are classified (cuda_gym/eval/memory.py, task_setup.py)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from cuda_gym.eval import ErrorCode
from cuda_gym.eval.failures import is_oom
from cuda_gym.eval.memory import NotEnoughMemory, plan_memory
from cuda_gym.eval.output_report import finite
from cuda_gym.eval.phase_clock import PhaseClock
from cuda_gym.eval.task_setup import TaskSetup
from cuda_gym.tasks import get_task, solution_path

MIB = 2**20
HOSTILE = Path(__file__).parent / "hostile"
# A light CPU config for a worker's task setup built in this process (no worker, no timing).
SETUP_CONFIG = {"correctness_trials": 5, "timing_input_sets": 3, "warmup_reps": 1, "timing_reps": 5,
                "timing_min_reps": 3, "timing_budget_s": 0.1, "l2_flush": False, "precision": "fp32",
                "policy": "strict", "baselines": ["eager"], "device_memory_gb": 1}


def _cpu_setup(source: str, device_memory_gb: float = 1, **job) -> TaskSetup:
    """The worker's `TaskSetup` for task `source` on the CPU; `job` adds job fields (model_copies)."""
    return TaskSetup({"task_id": "t", "task_source": source, "sizes": {}, "seed": 0, **job,
                              "config": dict(SETUP_CONFIG, device_memory_gb=device_memory_gb)}, "cpu")


def test_everything_resident_when_it_fits():
    plan = plan_memory(input_bytes=64 * MIB, output_bytes=64 * MIB, reference_extra_bytes=0, used_bytes=128 * MIB,
                       budget_bytes=8 * 2**30, trials=5, timing_sets=3)
    assert (plan.resident_outputs, plan.timing_sets) == (5, 3)


def test_a_tight_budget_keeps_fewer_draws_resident():
    # 8 GiB of inputs and 8 GiB of output, as KernelBench's 39_L2Norm_, on a 72 GiB budget (plan arithmetic only).
    gib = 2**30
    plan = plan_memory(input_bytes=8 * gib, output_bytes=8 * gib, reference_extra_bytes=0, used_bytes=8 * gib,
                       budget_bytes=72 * gib, trials=5, timing_sets=3, min_slack_bytes=256 * MIB)
    assert plan.resident_outputs == 3 and plan.timing_sets == 0  # the base inputs are the timing set
    peak = (plan.used_bytes + 2 * plan.input_bytes + 2 * plan.output_bytes
            + plan.resident_outputs * plan.output_bytes + plan.timing_sets * plan.input_bytes)
    assert peak <= plan.budget_bytes
    roomier = plan_memory(input_bytes=2 * gib, output_bytes=2 * gib, reference_extra_bytes=0, used_bytes=2 * gib,
                          budget_bytes=72 * gib, trials=5, timing_sets=3, min_slack_bytes=256 * MIB)
    assert roomier.resident_outputs == 5 and roomier.timing_sets == 3


def test_the_weights_copied_later_are_planned_for():
    # The candidate's model and the host pairing's fresh reference each copy the weights after the
    # plan is made: a plan that leaves them out would over-fill the budget on a task with big weights.
    gib = 2**30
    args = dict(input_bytes=8 * gib, output_bytes=8 * gib, reference_extra_bytes=0, used_bytes=8 * gib,
                budget_bytes=72 * gib, trials=5, timing_sets=3, min_slack_bytes=256 * MIB)
    without = plan_memory(**args)
    with_copies = plan_memory(**args, model_copy_bytes=2 * 4 * gib)
    assert (without.resident_outputs, with_copies.resident_outputs) == (3, 2)
    peak = (with_copies.used_bytes + with_copies.model_copy_bytes + 2 * with_copies.input_bytes
            + 2 * with_copies.output_bytes + with_copies.resident_outputs * with_copies.output_bytes)
    assert peak <= with_copies.budget_bytes
    with pytest.raises(NotEnoughMemory) as caught:
        plan_memory(**args, model_copy_bytes=2 * 16 * gib)
    assert caught.value.needed_bytes > 72 * gib


def test_a_task_that_cannot_fit_says_how_much_it_needs():
    with pytest.raises(NotEnoughMemory) as caught:
        plan_memory(input_bytes=40 * 2**30, output_bytes=40 * 2**30, reference_extra_bytes=0, used_bytes=40 * 2**30,
                    budget_bytes=72 * 2**30, trials=5, timing_sets=3)
    message = str(caught.value)
    assert "GiB" in message and "72.00 GiB" in message and caught.value.needed_bytes > 72 * 2**30


@pytest.mark.parametrize("text", [
    "NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at CUDACachingAllocator.cpp:1131",
    "CUDA error: out of memory",
    "DefaultCPUAllocator: can't allocate memory: you tried to allocate 999999999999 bytes",
])
def test_allocation_failures_are_out_of_memory(text):
    assert is_oom(RuntimeError(text))
    assert not is_oom(RuntimeError("CUDA error: an illegal memory access was encountered"))


def _sizes(cpu_evaluator):
    task = get_task("builtin/L1/gelu")
    first = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text())
    assert first.ok, first.message
    memory = first.device_memory
    assert memory["resident_outputs"] == 5 and memory["timing_sets"] == 0  # timed calls get fresh draws
    return task, memory["input_gib"], memory["output_gib"], memory["reference_extra_gib"]


def test_a_task_past_a_small_budget_is_judged_correctly(cpu_evaluator):
    task, input_gib, output_gib, extra_gib = _sizes(cpu_evaluator)
    # Room for one trial only: every reference output is recomputed after the candidate's trial,
    # and the timed calls' fresh draws are loaded into a copy of the base inputs.
    budget = 2 * input_gib + 2 * output_gib + extra_gib + 0.25 * max(input_gib, output_gib) + 0.2 * output_gib
    config = replace(cpu_evaluator.config, device_memory_gb=budget)
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text(), config=config)
    assert result.ok, result.message
    assert result.device_memory["resident_outputs"] == 0 and result.device_memory["timing_sets"] == 0
    assert len(result.trials) == 5 and all(t.passed for t in result.trials)

    # The same budget does not let an uninitialised output pass: freed reference outputs are scrubbed.
    hostile = cpu_evaluator.evaluate(task, (HOSTILE / "cpu_uninit_empty_like.py").read_text(), config=config)
    assert hostile.error_code is ErrorCode.INCORRECT, hostile.message

    # And a wrong kernel is still caught on a recomputed reference.
    wrong = solution_path(task, "cpu").read_text().replace("0.5f *", "0.49f *")
    assert wrong != solution_path(task, "cpu").read_text()
    bad = cpu_evaluator.evaluate(task, wrong, config=config)
    assert bad.error_code is ErrorCode.INCORRECT, bad.message


def test_a_task_that_does_not_fit_is_a_task_error_with_numbers(cpu_evaluator):
    task = get_task("builtin/L1/gelu")
    config = replace(cpu_evaluator.config, device_memory_gb=0.05)  # 50 MiB: under one trial of 32 MiB tensors
    result = cpu_evaluator.evaluate(task, solution_path(task, "cpu").read_text(), config=config)
    assert result.error_code is ErrorCode.TASK_ERROR
    assert "does not fit" in result.message and "GiB" in result.message and "0.05 GiB" in result.message



def test_draws_whose_reference_is_not_finite_fall_back_to_a_plain_draw():
    source = (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.sqrt()\n"  # NaN on the negated and centred draws
        "def get_inputs():\n    return [torch.rand(64, 64)]\n"
        "def get_init_inputs():\n    return []\n")
    setup = _cpu_setup(source)
    setup.prepare_trials(lambda index, outputs: None)
    setup.prepare_timing_sets()
    assert setup.distributions == ["task", "fresh", "fresh", "scaled_x3", "fresh"]
    assert setup.fallback == {2, 4} and setup.timing_sets == [setup.base]  # timed calls get fresh draws
    assert all(finite(setup.reference_output(i)) for i in range(8))


@pytest.mark.parametrize("forward", ["torch.nn.functional.smooth_l1_loss(a, b)",  # 0-dim on an input-sized storage
                                     "a[:1, :3]"])  # a view of its input's storage
def test_kept_reference_outputs_hold_only_their_own_size(forward):
    # L1/96_HuberLoss on the GPU: five kept 0-dim outputs held 4 GiB each, which the plan counts as 4
    # bytes (peak 76.1 GiB against a 64 GiB budget). A kept output holds its own size, and the same values.
    source = ("import torch\n"
              "class Model(torch.nn.Module):\n"
              "    def forward(self, a, b):\n"
              f"        return {forward}\n"
              "def get_inputs():\n    return [torch.rand(512, 512), torch.rand(512, 512)]\n"
              "def get_init_inputs():\n    return []\n")
    setup = _cpu_setup(source)
    setup.prepare_trials(lambda index, outputs: None)
    kept = [output for outputs in setup.reference_outputs if outputs for output in outputs]
    assert len(kept) == 5
    assert all(o.untyped_storage().nbytes() == o.numel() * o.element_size() for o in kept)
    inputs = [v.clone() for v in setup.draw(1).inputs]
    expected = setup.model(*inputs)
    assert torch.equal(setup.reference_outputs[1][0], expected)
    assert expected.untyped_storage().nbytes() > expected.numel() * expected.element_size()  # what the model returns


def test_the_paired_reference_copy_is_dropped_before_the_task_is():
    # A model with 4 MiB of weights: a budget with room for one copy of them (the candidate's) but
    # not two keeps the task, plans without the host pairing's copy and says why it is skipped.
    source = (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(1024, 1024, bias=False)\n"
        "    def forward(self, x):\n"
        "        return self.linear(x)\n"
        "def get_inputs():\n    return [torch.randn(64, 1024)]\n"
        "def get_init_inputs():\n    return []\n")

    def setup(copies: int, budget_gb: float) -> TaskSetup:
        return _cpu_setup(source, device_memory_gb=budget_gb, model_copies=copies)

    weights = 1024 * 1024 * 4
    roomy = setup(2, 1.0)
    assert roomy.plan.model_copy_bytes == 2 * weights and roomy.pairing_unplanned == ""
    plan = roomy.plan
    one_trial = (2 * plan.input_bytes + 2 * plan.output_bytes + plan.reference_extra_bytes
                 + 0.25 * max(plan.input_bytes, plan.output_bytes))
    tight = setup(2, (one_trial + 1.5 * weights) / 2**30)
    assert tight.plan.model_copy_bytes == weights
    assert "does not fit the memory plan" in tight.pairing_unplanned
    with pytest.raises(NotEnoughMemory):
        setup(1, (one_trial + 0.5 * weights) / 2**30)  # not even the candidate's copy: TASK_ERROR as before


def test_a_task_with_no_room_for_the_paired_copy_is_judged_unpaired(cpu_evaluator, wide_pairing_band):
    task = get_task("builtin/L2/linear_gelu")
    config = replace(cpu_evaluator.config, host_pairing=("cpu",), policy="permissive", timing_warmup_s=0.0,
                     timing_budget_s=0.0, warmup_reps=1, timing_reps=4, timing_min_reps=4)
    source = task.source + "\n\nclass ModelNew(Model):\n    pass\n"
    roomy = cpu_evaluator.evaluate(task, source, config=config)
    assert roomy.ok and "ratio" in roomy.host_pairing, (roomy.message, roomy.host_pairing)
    plan = roomy.device_memory
    weights_gib = plan["model_copy_gib"] / 2
    assert weights_gib > 0
    one_trial = (2 * plan["input_gib"] + 2 * plan["output_gib"] + plan["reference_extra_gib"]
                 + 0.25 * max(plan["input_gib"], plan["output_gib"]))
    tight = cpu_evaluator.evaluate(task, source, config=replace(config, device_memory_gb=one_trial + 1.5 * weights_gib))
    assert tight.ok, tight.message
    assert "does not fit the memory plan" in tight.host_pairing["skipped"]
    assert tight.device_memory["model_copy_gib"] == pytest.approx(weights_gib)


class _SimulatedAllocator:
    """torch's C peak counters of the CUDA caching allocator, simulated (bytes): what is reserved
    and allocated now, and the peaks since the last reset."""

    def __init__(self):
        self.reserved = self.allocated = self.reserved_peak = self.allocated_peak = 0

    def set(self, reserved: float, allocated: float) -> None:  # GiB
        self.reserved, self.allocated = int(reserved * 2**30), int(allocated * 2**30)
        self.reserved_peak = max(self.reserved_peak, self.reserved)
        self.allocated_peak = max(self.allocated_peak, self.allocated)

    def stats(self, device: int) -> dict:
        return {"reserved_bytes": {"all": {"peak": self.reserved_peak}},
                "allocated_bytes": {"all": {"peak": self.allocated_peak}}}

    def reset(self, device: int) -> None:
        self.reserved_peak, self.allocated_peak = self.reserved, self.allocated


def test_the_phase_clock_names_the_phase_of_the_peak(monkeypatch):
    import torch

    from cuda_gym.eval import memory

    allocator = _SimulatedAllocator()
    monkeypatch.setattr(torch._C, "_cuda_memoryStats", allocator.stats, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_resetPeakMemoryStats", allocator.reset, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(memory, "peak_meter", None)
    clock = PhaseClock("cuda")
    assert memory.peak_meter is not None  # scrub_freed reports to it
    # Candidate code patching torch.cuda's Python functions changes nothing the clock reads.
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: "patched")
    allocator.set(10, 9)
    clock.mark("setup")
    allocator.set(8, 8)
    # A scrub takes every cached block (allocated = reserved while it runs), then frees them: its
    # allocations stay out of the allocated peak; what the phase allocated before it counts.
    allocator.set(40, 20)
    allocator.set(30, 12)
    memory.peak_meter.before_scrub()
    allocator.set(30, 30)
    allocator.set(30, 12)
    memory.peak_meter.after_scrub()
    allocator.set(32, 14)
    clock.mark("timing")
    allocator.set(31, 28)
    meta = clock.memory_meta()
    assert meta["peak_gib"] == 40.0 and meta["peak_phase"] == "timing"
    assert meta["phase_peak_gib"] == {"setup": [10.0, 9.0], "timing": [40.0, 20.0], "(current)": [32.0, 28.0]}
    assert meta["peak_allocated_gib"] == 28.0  # the live tensors' peak, in the phase still running
    assert PhaseClock("cpu").memory_meta() == {} and memory.peak_meter is None
    # The evaluator keeps them in the result's device_memory, beside the plan.
    from cuda_gym.eval import EvalConfig, EvalResult
    from cuda_gym.eval.judgement import Judgement
    from cuda_gym.eval.protocol import Message

    result = EvalResult(task_id="t", backend="cuda", error_code=ErrorCode.OK, device_memory={"budget_gib": 64.0})
    assert Judgement(EvalConfig(), result).on_message(Message("memory", meta))
    assert result.device_memory == {"budget_gib": 64.0, "peak_gib": 40.0, "peak_allocated_gib": 28.0,
                                    "peak_phase": "timing", "phase_peak_gib": meta["phase_peak_gib"]}


@pytest.mark.parametrize("meta", [
    {"peak_gib": "patched"},
    {"peak_gib": 1.0, "peak_allocated_gib": "x", "peak_phase": [], "phase_peak_gib": {"a": ["1", 2]}},
    {"peak_gib": float("nan"), "phase_peak_gib": [1, 2]},
    {"peak_gib": True, "phase_peak_gib": {"a": 3}},
])
def test_a_malformed_memory_report_is_left_out_not_an_error(meta):
    # The memory message comes from a process where candidate code ran: values it could have bent
    # (a patched allocator query) are dropped, and the verdict is still the checks' to make.
    from cuda_gym.eval import EvalConfig, EvalResult
    from cuda_gym.eval.judgement import Judgement
    from cuda_gym.eval.protocol import Message

    result = EvalResult(task_id="t", backend="cuda", error_code=ErrorCode.OK, device_memory={"budget_gib": 64.0})
    judge = Judgement(EvalConfig(), result)
    assert judge.on_message(Message("memory", meta)) and not judge.decided
    kept = result.device_memory
    assert kept["budget_gib"] == 64.0
    assert all(isinstance(kept[key], float) for key in ("peak_gib", "peak_allocated_gib") if key in kept)
    assert all(isinstance(v, float) for pair in kept.get("phase_peak_gib", {}).values() for v in pair)
    assert "peak_gib" not in kept or meta["peak_gib"] == 1.0


def test_the_phase_clock_runs_without_the_allocator_statistics(monkeypatch):
    # A torch without the C functions the meter reads (or statistics that cannot be read): the job
    # still runs, and the peak falls back to the allocator's own query; a scrub still scrubs.
    import torch

    from cuda_gym.eval import memory

    monkeypatch.delattr(torch._C, "_cuda_memoryStats", raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a, **k: 3 * 2**30)
    clock = PhaseClock("cuda")
    clock.mark("setup")
    assert clock.memory_meta() == {"peak_gib": 3.0} and memory.peak_meter is None

    def broken(device):
        raise RuntimeError("statistics unavailable")

    monkeypatch.setattr(torch._C, "_cuda_memoryStats", broken, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_resetPeakMemoryStats", broken, raising=False)
    meter = memory.PeakMeter()
    meter.before_scrub(), meter.after_scrub()  # never raise: the scrub between them must run
    assert meter.take() is None
