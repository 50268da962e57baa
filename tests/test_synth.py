"""Task synthesis (cuda_gym.synth): composition, fingerprints, decontamination, the execution filter's
workers, the whole pipeline at CPU sizes, the synth suite and the LLM composer."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from cuda_gym.synth import (ComposerConfig, KernelBenchIndex, PlanError, RuleComposer, SynthConfig, build_plan,
                            normalized_hash, operator_signature, render, seed_catalogue, synthesize, write_result)
from cuda_gym.synth.compose import SizingConfig
from cuda_gym.synth.pipeline import OutputExistsError
from cuda_gym.synth.pool import CheckPool
from cuda_gym.tasks import Task, load_suite, task_from_source
from cuda_gym.tasks.task import load_task_namespace

CATALOGUE = seed_catalogue(include_transformers=False)
KERNELBENCH = Path(os.environ.get("CUDA_GYM_KERNELBENCH") or Path(__file__).resolve().parents[2] / "shared/data/kernelbench")
WIDE_WINDOW = (0.0001, 60_000.0)  # no timing rejections: the CPU here is shared and its timings noisy

# KernelBench-format programs of our own for the signature test (no KernelBench file is needed).
BARE_CONV_TRANSPOSE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Applies the transposed convolution."""
        return self.conv_transpose2d(x)

def get_inputs():
    return [torch.randn(16, 32, 64, 64)]

def get_init_inputs():
    return [32, 64, 3]
'''


def _task(source: str, name: str = "planted") -> Task:
    return task_from_source(source, task_id=f"kernelbench/L1/{name}", level=1, name=name)


def _run_reference(task: Task, backend: str = "cpu") -> list[torch.Tensor]:
    namespace = load_task_namespace(task.source, task.sizes_for(backend), task.id)
    model = namespace["Model"](*namespace["get_init_inputs"]()).eval()
    with torch.no_grad():
        out = model(*namespace["get_inputs"]())
    return list(out) if isinstance(out, (tuple, list)) else [out]


# ------------------------------------------------------------------------------------ composition
def test_composer_is_deterministic_and_renders_loadable_tasks():
    first = [render(RuleComposer(CATALOGUE, seed=3).compose(i)) for i in range(60)]
    second = [render(RuleComposer(CATALOGUE, seed=3).compose(i)) for i in range(60)]
    other_seed = [render(RuleComposer(CATALOGUE, seed=4).compose(i)) for i in range(60)]
    assert first == second
    assert first != other_seed
    levels = set()
    for index, source in enumerate(first):
        plan = RuleComposer(CATALOGUE, seed=3).compose(index)
        task = task_from_source(source, task_id=f"synth/L{plan.level}/{plan.name}", level=plan.level, name=plan.name)
        assert 1 <= plan.level <= 5
        levels.add(plan.level)
        assert set(task.sizes) == {"cuda", "cpu"} and task.sizes["cuda"].keys() == task.sizes["cpu"].keys()
        assert task.sizes["cuda"]["batch_size"] >= 1
        assert operator_signature(source), f"no operators found in {plan.name}"
    assert levels == {1, 2, 3, 4, 5}


def test_build_plan_refuses_bad_plans_with_reasons():
    import random

    def plan(ops, kind):
        return build_plan(CATALOGUE, ops, input_kind=kind, rng=random.Random(0), index=0, seed=0,
                          sizing=SizingConfig(), composer="test")

    assert plan([("conv2d", {"kernel_size": 3, "stride": 1}), ("relu", {})], "image").ops == ["conv2d", "relu"]
    with pytest.raises(PlanError, match="unknown operator 'convolution9d'"):
        plan([("convolution9d", {})], "image")
    with pytest.raises(PlanError, match="kernel_size=7 is not allowed"):
        plan([("conv2d", {"kernel_size": 7})], "image")
    with pytest.raises(PlanError, match="does not apply"):
        plan([("conv2d", {})], "features")
    with pytest.raises(PlanError, match="only be the first operator"):
        plan([("relu", {}), ("hardshrink", {})], "features")
    assert plan([("hardshrink", {}), ("relu", {})], "features").ops == ["hardshrink", "relu"]
    with pytest.raises(PlanError, match="no parameter"):
        plan([("relu", {"kernel_size": 3})], "features")


# ----------------------------------------------------------------------------------- fingerprints
def test_operator_signature_is_spelling_independent():
    module = BARE_CONV_TRANSPOSE
    functional = module.replace("self.conv_transpose2d = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, "
                                "stride=2)", "self.w = nn.Parameter(torch.randn(in_channels, out_channels, 3, 3))")
    functional = functional.replace("return self.conv_transpose2d(x)", "return F.conv_transpose2d(x, self.w, stride=2)")
    assert operator_signature(module) == operator_signature(functional) == ("conv_transpose2d",)
    relu_forms = ["torch.relu(x)", "F.relu(x)", "x.relu()", "nn.ReLU()(x)", "torch.nn.functional.relu(x, inplace=True)"]
    for form in relu_forms:
        source = BARE_CONV_TRANSPOSE.replace("return self.conv_transpose2d(x)", f"return {form}.view(x.size(0), -1)")
        assert operator_signature(source) == ("relu",), form
    chained = BARE_CONV_TRANSPOSE.replace("return self.conv_transpose2d(x)",
                                          "y = torch.bmm(x, x.transpose(1, 2)) * 2.0\n        return torch.amax(y @ y, dim=1)")
    assert operator_signature(chained) == ("matmul", "mul", "matmul", "max")


def test_normalized_hash_ignores_names_and_sizes_not_parameters():
    source = render(build_plan(CATALOGUE, [("conv2d", {"kernel_size": 3}), ("gelu", {"form": "module"})],
                               input_kind="image", rng=__import__("random").Random(1), index=0, seed=0,
                               sizing=SizingConfig(), composer="test"))
    renamed = source.replace("conv2d_0", "my_convolution").replace("channels", "chans")
    resized = source.replace("batch_size = ", "batch_size = 1 + ")
    other_kernel = source.replace(", 3", ", 5", 1)
    assert other_kernel != source
    assert normalized_hash(source) == normalized_hash(renamed) == normalized_hash(resized)
    assert normalized_hash(source) != normalized_hash(other_kernel)


# ------------------------------------------------------------------------------- decontamination
def test_signature_match_removes_a_bare_conv_transpose():
    index = KernelBenchIndex([_task(BARE_CONV_TRANSPOSE, "57_conv_transposed_2D")])
    synthesized = render(build_plan(CATALOGUE, [("conv_transpose2d", {})], input_kind="image",
                                    rng=__import__("random").Random(0), index=0, seed=0, sizing=SizingConfig(),
                                    composer="test"))
    match = index.match(synthesized)
    assert match is not None and match.test == "signature" and match.score == 1.0
    assert match.kernelbench_id == "kernelbench/L1/57_conv_transposed_2D"
    longer = render(build_plan(CATALOGUE, [("conv_transpose2d", {}), ("tanh", {})], input_kind="image",
                               rng=__import__("random").Random(0), index=0, seed=0, sizing=SizingConfig(),
                               composer="test"))
    assert index.match(longer) is None
    fuzzy = KernelBenchIndex([_task(BARE_CONV_TRANSPOSE, "57_conv_transposed_2D")], signature_threshold=0.6)
    assert fuzzy.match(longer).test == "signature"


def test_planted_kernelbench_copy_is_removed():
    files = sorted((KERNELBENCH / "KernelBench" / "level2").glob("*.py"))[:5]
    if not files:
        pytest.skip(f"no KernelBench data at {KERNELBENCH} (set CUDA_GYM_KERNELBENCH)")
    index = KernelBenchIndex.from_path(KERNELBENCH)
    assert len(index) >= 250
    for path in files:
        source = path.read_text()
        match = index.match(source)
        assert match is not None and match.kernelbench_id.endswith(path.stem) and match.score == 1.0
        # One more operator changes the signature; the AST is still > 0.9 similar.
        edited = source.replace("        return x\n", "        x = x * 1.5\n        return x\n", 1)
        if edited == source:
            continue
        match = index.match(edited)
        assert match is not None and match.test == "ast" and 0.9 <= match.score < 1.0, path.name


# ---------------------------------------------------------------------------------- filter checks
ONE_LINE_TASK = """
import torch
import torch.nn as nn

batch_size = 64


class Model(nn.Module):
    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(batch_size, 256)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("expr, stage", [
    ("torch.tanh(x)", "passed"),
    ("x.add_(1.0)", "mutates_inputs"),
    ("x * 1e-6", "magnitude"),
    ("x + torch.rand_like(x)", "nondeterministic"),
    ("torch.exp(x * 100.0)", "nonfinite"),
    ("torch.ones_like(x)", "degenerate"),
    ("x @ x", "eager"),
])
def test_each_filter_check_rejects_its_failure(expr, stage):
    from cuda_gym.synth.check import check_task

    settings = SynthConfig(backend="cpu", window_ms=WIDE_WINDOW).filter_settings()
    result = check_task({"source": ONE_LINE_TASK.format(expr=expr), "backend": "cpu", "sizes": {}, "config": settings})
    assert result["stage"] == stage, result
    assert result["ok"] == (stage == "passed")
    narrow = dict(settings, window_ms=[5000.0, 6000.0], calibration_rounds=0)
    assert check_task({"source": ONE_LINE_TASK.format(expr="torch.tanh(x)"), "backend": "cpu", "sizes": {},
                       "config": narrow})["stage"] == "timing"


# ------------------------------------------------------------------------------------ worker pool
@pytest.mark.slow
def test_pool_survives_crashing_and_hanging_tasks():
    settings = SynthConfig(backend="cpu", window_ms=WIDE_WINDOW).filter_settings()
    good = render(RuleComposer(CATALOGUE, seed=0).compose(1))
    jobs = [{"kind": "check", "source": "import os\nos.abort()\n", "backend": "cpu", "sizes": {}, "config": settings},
            {"kind": "check", "source": "import time\ntime.sleep(600)\n", "backend": "cpu", "sizes": {},
             "config": settings},
            {"kind": "check", "source": "def broken(:\n", "backend": "cpu", "sizes": {}, "config": settings},
            {"kind": "check", "source": good, "backend": "cpu", "sizes": task_from_source(
                good, task_id="synth/L1/x", level=1, name="x").sizes["cpu"], "config": settings}]
    with CheckPool("cpu", workers=2, threads=1) as pool:
        results = pool.run(jobs, timeout_s=8, progress=False)
        assert pool.restarts >= 2
    assert [r["stage"] for r in results] == ["crash", "timeout", "load", "passed"]
    assert "SIGABRT" in results[0]["message"]
    assert "SyntaxError" in results[2]["message"] or "not valid Python" in results[2]["message"]
    assert results[3]["eager_ms"] > 0


# ------------------------------------------------------------------------------------- pipeline
@pytest.fixture(scope="module")
def small_kernelbench(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kernelbench") / "KernelBench" / "level1"
    root.mkdir(parents=True)
    (root / "57_conv_transposed_2D.py").write_text(BARE_CONV_TRANSPOSE)
    return root.parent.parent


def test_pipeline_is_deterministic_and_deduplicates(tmp_path, small_kernelbench):
    small = {name: CATALOGUE[name] for name in ("relu", "tanh", "linear")}
    config = SynthConfig(n=4, backend="cpu", seed=5, compile_check=0, window_ms=WIDE_WINDOW, workers=2,
                         kernelbench=str(small_kernelbench), progress=False,
                         composer=ComposerConfig(max_ops=2, heavy_first=0.0))
    runs = [synthesize(config, RuleComposer(small, seed=5, config=config.composer)) for _ in range(2)]
    sources = [[t.source for t in run.tasks] for run in runs]
    assert sources[0] == sources[1] and len(sources[0]) == 4
    assert runs[0].funnel["duplicate"] > 0
    assert len({t.hash for t in runs[0].tasks}) == 4


@pytest.mark.slow
def test_pipeline_cpu_writes_a_loadable_clean_suite(tmp_path, small_kernelbench):
    kernelbench = KERNELBENCH if (KERNELBENCH / "KernelBench").is_dir() else small_kernelbench
    config = SynthConfig(n=20, backend="cpu", seed=0, compile_check=2, workers=2, kernelbench=str(kernelbench),
                         include_transformers=False, progress=False)
    result = synthesize(config)
    funnel = result.funnel
    assert len(result.tasks) + funnel["compile"] + funnel["compile_mismatch"] == 20
    assert funnel["composed"] == (funnel["compose_failed"] + funnel["duplicate"] + funnel["contaminated_signature"]
                                  + funnel["contaminated_ast"] + funnel["checked"])
    failed = sum(funnel[s] for s in ("load", "eager", "timing", "out_of_memory", "mutates_inputs", "magnitude",
                                     "nondeterministic",
                                     "nonfinite", "degenerate", "crash", "timeout"))
    assert funnel["checked"] == failed + funnel["passed_execution"]
    assert funnel["compile_checked"] == 2
    for task in result.tasks:
        low, high = config.window
        assert low <= task.eager_ms <= high
    out = write_result(result, tmp_path / "synth")
    tasks = load_suite("synth", data_path=out)
    assert [t.id for t in tasks] == sorted(t.task_id for t in result.tasks)
    assert len({normalized_hash(t.source) for t in tasks}) == len(tasks)
    index = KernelBenchIndex.from_path(kernelbench)
    for task in tasks:
        assert index.match(task.source) is None
        outputs = _run_reference(task)
        assert all(torch.isfinite(o.float()).all() for o in outputs), task.id
    report = (out / "decontamination.json").read_text()
    assert '"removed"' in report
    with pytest.raises(OutputExistsError):
        write_result(result, out)
    write_result(result, out, overwrite=True)
    assert len(load_suite("synth", data_path=out)) == len(tasks)


def test_synth_task_runs_in_the_evaluator(tmp_path, cpu_evaluator):
    """A synthesized task is an ordinary task to the evaluator (its reference loads, runs and is timed)."""
    plan = build_plan(CATALOGUE, [("linear", {"out_features": 512}), ("gelu", {"form": "functional"})],
                      input_kind="features", rng=__import__("random").Random(0), index=7, seed=0,
                      sizing=SizingConfig(), composer="test")
    task = task_from_source(render(plan), task_id=f"synth/L2/{plan.name}", level=2, name=plan.name)
    candidate = task.source + "\n\nclass ModelNew(Model):\n    pass\n"
    result = cpu_evaluator.evaluate(task, candidate, config=cpu_evaluator.config.replace(policy="permissive"))
    assert result.correct, result.summary()


# ------------------------------------------------------------------------------------ LLM composer
def test_llm_composer_builds_the_model_plan_and_retries_once():
    llm = pytest.importorskip("cuda_gym_agents.llm")
    from cuda_gym.synth.llm import LLMComposer

    chat = llm.ScriptedChat([
        "Here you go: conv2d then relu",  # not JSON: sent back once with the error
        '```json\n{"input": "image", "ops": [{"op": "conv2d", "params": {"kernel_size": 5}}, "relu"]}\n```',
        '{"input": "image", "ops": [{"op": "warp_drive"}]}',
        '{"input": "image", "ops": [{"op": "warp_drive"}]}',
    ])
    composer = LLMComposer(chat, CATALOGUE, seed=0, concurrency=1)
    plan = composer.compose(0)
    assert plan.ops == ["conv2d", "relu"] and plan.composer == "llm"
    assert "nn.Conv2d(channels, out_channels, 5" in render(plan)
    assert "not one JSON object" in chat.calls[1][-1]["content"]
    with pytest.raises(PlanError, match="unknown operator 'warp_drive'"):
        composer.compose(1)
    with pytest.raises(PlanError, match="chat backend failed"):
        composer.compose(2)  # the script ran out: BackendError


@pytest.mark.gpu
def test_pipeline_cuda_keeps_tasks_in_the_window(tmp_path, small_kernelbench):
    config = SynthConfig(n=8, backend="cuda", seed=1, compile_check=2, workers=2, kernelbench=str(small_kernelbench),
                         include_transformers=False, progress=False)
    result = synthesize(config)
    assert result.funnel["compile_checked"] == 2
    assert len(result.tasks) >= 6, result.funnel_rows()
    for task in result.tasks:
        assert 1.0 <= task.eager_ms <= 100.0
    out = write_result(result, tmp_path / "synth")
    assert len(load_suite("synth", data_path=out)) == len(result.tasks)
