"""The template agent: broadcasting and expressions, the fx matcher on built-in and KernelBench
references, the rendered candidates' correctness on the CPU backend (one task per template kind), the
knob masks, and `cuda-gym solve`'s summary."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from cuda_gym_agents import template_cli
from cuda_gym_agents.template_agent import (CPU_KNOBS, CUDA_KNOBS, KnobSpace, TemplateAgent, Unsupported, broadcast_terms,
                                            expr_to_c, plan_task, render_candidate, render_kernels, template_dir)
from cuda_gym.tasks import get_task, load_suite

from .fakes import NeverDone, RecordingEvaluator

KERNELBENCH = os.environ.get("CUDA_GYM_KERNELBENCH") or "/work/shared/data/kernelbench"


def _kernelbench_tasks(levels):
    if not Path(KERNELBENCH).exists():
        pytest.skip(f"KernelBench data not found at {KERNELBENCH} (set $CUDA_GYM_KERNELBENCH)")
    return {t.id: t for t in load_suite("kernelbench", levels=levels, data_path=KERNELBENCH)}


def test_broadcast_terms():
    assert broadcast_terms((4, 8), (4, 8)) == [(1, 32, 1)]                 # full
    assert broadcast_terms((8,), (4, 8)) == [(1, 8, 1)]                    # row vector
    assert broadcast_terms((3, 1, 1), (2, 3, 5, 5)) == [(25, 3, 1)]        # per channel
    assert broadcast_terms((1,), (2, 3)) == []                             # scalar
    assert broadcast_terms((2, 1, 5), (2, 3, 5)) == [(15, 2, 5), (1, 5, 1)]  # broadcast in the middle
    with pytest.raises(Unsupported):
        broadcast_terms((4,), (2, 3))


def test_expressions_render_to_c():
    expr = ("f", "mul", ("f", "gelu", ("v",)), ("f", "add", ("op", 0), ("c", 0.5)))
    assert expr_to_c(expr, ["a0"]) == "(cg_gelu(v) * (a0 + 0.5f))"
    assert expr_to_c(("f", "clamp", ("v",), ("c", float("-inf")), ("c", 1.0)), []) == "cg_clamp(v, (-INFINITY), 1.0f)"


def test_templates_are_found_and_document_their_knobs():
    folder = template_dir()
    for name in ("common.h", "elementwise.cuh", "elementwise.hpp", "reduce.cuh", "reduce.hpp", "gemm.cuh", "gemm.hpp",
                 "gemm_cublas.cuh", "conv_cudnn.cuh", "conv.cuh", "conv.hpp"):
        text = (folder / name).read_text()
        assert text.startswith("//") and ("Knobs" in text or name == "common.h"), name


BUILTIN_PLANS = {
    "builtin/L1/gelu": ["elementwise"],
    "builtin/L1/argmax_dim": ["argreduce"],
    "builtin/L1/conv_transpose2d": ["conv_transpose"],
    "builtin/L2/linear_gelu": ["gemm"],
    "builtin/L2/conv2d_group_norm_tanh": ["conv", "norm"],
    "builtin/L2/conv2d_max_pool_hardswish": ["conv", "pool"],
    "builtin/L2/rms_norm_silu": ["reduce", "elementwise"],  # x * x is the reduction's prologue
    "builtin/L3/mlp": ["gemm", "gemm", "gemm"],
}


def test_builtin_plans():
    for task_id, kinds in BUILTIN_PLANS.items():
        assert plan_task(get_task(task_id), "cpu").stage_kinds == kinds, task_id
    # the epilogue is fused: bias + GELU live in the GEMM stage, not in an extra kernel
    stage = plan_task(get_task("builtin/L2/linear_gelu"), "cuda").stages[0]
    assert stage.epilogue[1] == "gelu" and len(stage.operands) == 1
    with pytest.raises(Unsupported, match="cumsum"):
        plan_task(get_task("builtin/L1/cumsum"), "cpu")
    covered = []
    for task in load_suite("builtin"):
        try:
            plan_task(task, "cpu")
            covered.append(task.id)
        except Unsupported:
            pass
    assert len(covered) >= 45


def test_kernelbench_matcher_level1_and_level2():
    tasks = _kernelbench_tasks((1, 2))
    expected = {
        "kernelbench/L1/19_ReLU": ["elementwise"],
        "kernelbench/L1/1_Square_matrix_multiplication_": ["gemm"],
        "kernelbench/L1/23_Softmax": ["norm"],
        "kernelbench/L1/40_LayerNorm": ["norm"],
        "kernelbench/L1/47_Sum_reduction_over_a_dimension": ["reduce"],
        "kernelbench/L1/51_Argmax_over_a_dimension": ["argreduce"],
        "kernelbench/L1/42_Max_Pooling_2D": ["pool"],
        "kernelbench/L1/63_conv_standard_2D__square_input__square_kernel": ["conv"],
        "kernelbench/L1/17_Matmul_with_transposed_B": ["gemm"],
        "kernelbench/L2/1_Conv2D_ReLU_BiasAdd": ["conv"],
        "kernelbench/L2/12_Gemm_Multiply_LeakyReLU": ["gemm"],
        "kernelbench/L1/36_RMSNorm_": ["reduce", "elementwise"],  # x ** 2 is the reduction's prologue
        "kernelbench/L1/100_HingeLoss": ["reduce"],  # clamp(1 - p * t) in the load, t broadcast
    }
    for task_id, kinds in expected.items():
        assert plan_task(tasks[task_id], "cuda").stage_kinds == kinds, task_id
    hinge = plan_task(tasks["kernelbench/L1/100_HingeLoss"], "cuda").stages[0]
    assert hinge.params["prologue"][1] == "clamp" and [o.buffer.ref for o in hinge.params["prologue_operands"]] == ["targets"]
    # transposed B is read through strides, not copied
    gemm = plan_task(tasks["kernelbench/L1/17_Matmul_with_transposed_B"], "cuda").stages[0]
    assert gemm.params["b_strides"][1:] == (1, gemm.params["K"])
    for task_id, reason in {"kernelbench/L1/95_CrossEntropyLoss": "not an fp32 tensor",
                            "kernelbench/L1/89_cumsum": "cumsum"}.items():
        with pytest.raises(Unsupported, match=reason):
            plan_task(tasks[task_id], "cuda")
    covered = {1: 0, 2: 0}
    for task in tasks.values():
        try:
            plan = plan_task(task, "cuda")
        except Unsupported:
            continue
        covered[task.level] += 1
        source, launches, _, _ = render_kernels(plan, KnobSpace.for_plan(plan).values(KnobSpace.for_plan(plan).default()))
        assert all(f'extern "C" int {launch.function}(' in source for launch in launches), task.id
    assert covered[1] >= 75 and covered[2] >= 80, covered


def test_knob_masks():
    gelu = KnobSpace.for_plan(plan_task(get_task("builtin/L1/gelu"), "cuda"))
    free = gelu.free_names()
    assert free == {"ew_block", "ew_items", "ew_vec"}
    assert gelu.size() == 4 * 4 * 3
    gemm = KnobSpace.for_plan(plan_task(get_task("builtin/L2/linear_gelu"), "cuda"))
    free = gemm.free_names()
    assert {"gemm_impl", "tile_m", "fuse_epilogue"} <= free and "ew_block" in free  # fusion off adds a pass
    assert gemm.values(gemm.default())["gemm_impl"] == "cublas"
    rng = random.Random(0)
    for _ in range(20):
        assert gemm.valid(gemm.sample(rng))
    bad = list(gemm.default())
    bad[[k.name for k in gemm.knobs].index("ew_block")] = 99
    assert not gemm.valid(bad) and gemm.canonical(bad) == gemm.default()
    assert [k.name for k in CUDA_KNOBS][-1] == [k.name for k in CPU_KNOBS][-1] == "fuse_epilogue"


# One task per template kind (elementwise, reduce, argreduce, norm, gemm, conv, conv_transpose, pool).
CPU_CORRECTNESS = ["builtin/L1/argmax_dim", "builtin/L1/conv_transpose2d", "builtin/L2/conv2d_group_norm_tanh",
                   "builtin/L2/conv2d_max_pool_hardswish", "builtin/L2/linear_gelu", "builtin/L2/rms_norm_silu",
                   "builtin/L2/residual_layer_norm"]  # the last two: a pointwise prologue in a reduction, a norm


@pytest.mark.slow
@pytest.mark.parametrize("task_id", CPU_CORRECTNESS)
def test_rendered_candidates_are_correct_on_cpu(cpu_evaluator, task_id):
    task = get_task(task_id)
    plan = plan_task(task, "cpu")
    space = KnobSpace.for_plan(plan)
    result = cpu_evaluator.evaluate(task, render_candidate(plan, space.values(space.default())))
    assert result.correct, (result.error_code, result.message, result.compile_log[-1500:], result.runtime_log[-1500:])
    assert not result.forbidden_ops


def test_unfused_and_tuned_configurations_stay_correct(cpu_evaluator):
    task = get_task("builtin/L2/linear_gelu")
    plan = plan_task(task, "cpu")
    space = KnobSpace.for_plan(plan)
    knobs = dict(space.values(space.default()), fuse_epilogue=0, gemm_mc=8, gemm_nc=64, gemm_kc=512)
    source = render_candidate(plan, knobs)
    assert source.count("_cg_check(_cg_lib.") == 2  # the epilogue became its own elementwise pass
    result = cpu_evaluator.evaluate(task, source)
    assert result.correct, (result.error_code, result.message, result.runtime_log[-1500:])


def test_agent_random_search_and_summary(cpu_evaluator, tmp_path):
    agent = TemplateAgent(cpu_evaluator, "cpu", seed=1)
    solved = agent.solve(get_task("builtin/L1/argmax_dim"), budget=3)
    assert len(solved.trials) == 3 and len({t.action for t in solved.trials}) == 3
    assert solved.trials[0].action == KnobSpace.for_plan(plan_task(get_task("builtin/L1/argmax_dim"), "cpu")).default()
    assert solved.best is not None and solved.best.result.correct and solved.best_source
    uncovered = agent.solve(get_task("builtin/L1/cumsum"))
    assert uncovered.plan_error and not uncovered.trials
    summary = template_cli.write_outputs(tmp_path, [solved, uncovered], {"backend": "cpu"})
    assert summary["episodes"] == 2 and summary["covered"] == 1 and summary["pass_rate"] == 0.5
    assert summary["tasks"]["builtin/L1/cumsum"]["best_error_code"] == "NOT_COVERED"
    assert summary["tasks"]["builtin/L1/argmax_dim"]["best_error_code"] == "OK"
    assert summary["levels"]["1"]["geomean_speedup_vs_eager"] == pytest.approx(
        solved.best.result.speedup_vs_eager)
    assert (tmp_path / "candidates" / "builtin__L1__argmax_dim.py").exists()
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and len(json.loads(lines[0])["trials"]) in (0, 3)


def test_solve_command_rejects_bad_arguments(tmp_path, capsys):
    from cuda_gym.cli import main

    assert main(["solve", "--agent", "template", "--backend", "cpu"]) == 2
    assert "--tasks" in capsys.readouterr().err
    assert main(["solve", "--tasks", "builtin/L1/gelu", "--budget", "0", "--backend", "cpu"]) == 2
    assert main(["solve", "--tasks", "builtin/L1/gelu", "--sb3-model", str(tmp_path / "none.zip"),
                 "--backend", "cpu"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_solve_command_rejects_a_model_trained_on_another_knob_space(tmp_path, capsys):
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import PPO

    from cuda_gym.cli import main

    class OtherSpace(gym.Env):  # a knob space of three knobs, unlike any backend's
        observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        action_space = gym.spaces.MultiDiscrete([2, 3, 4])

        def reset(self, *, seed=None, options=None):
            return np.zeros(4, np.float32), {}

        def step(self, action):
            return np.zeros(4, np.float32), 0.0, True, False, {}

    path = tmp_path / "other.zip"
    PPO("MlpPolicy", OtherSpace(), n_steps=8, batch_size=8, device="cpu").save(path)
    assert main(["solve", "--tasks", "builtin/L1/gelu", "--sb3-model", str(path), "--backend", "cpu",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "acts on 3 knobs" in err and "train a new one" in err

    # a model on the backend's own knob space proposes valid actions
    from cuda_gym_agents.template_agent import sb3_policy
    from cuda_gym.envs.schedule_env import FEATURES

    space = KnobSpace.for_plan(plan_task(get_task("builtin/L1/gelu"), "cpu"))

    class CpuSpace(OtherSpace):
        observation_space = gym.spaces.Box(-8.0, 64.0, (len(FEATURES),), np.float32)
        action_space = gym.spaces.MultiDiscrete(space.nvec)

        def reset(self, *, seed=None, options=None):
            return np.zeros(len(FEATURES), np.float32), {}

        def step(self, action):
            return np.zeros(len(FEATURES), np.float32), 0.0, True, False, {}

    PPO("MlpPolicy", CpuSpace(), n_steps=8, batch_size=8, device="cpu").save(path)
    factory = sb3_policy(str(path))
    plan = plan_task(get_task("builtin/L1/gelu"), "cpu")
    assert factory.trained_nvec == space.nvec
    action = factory(plan, get_task("builtin/L1/gelu"), space)()
    assert len(action) == len(space.nvec) and all(0 <= a < n for a, n in zip(action, space.nvec))


@pytest.mark.gpu
@pytest.mark.parametrize("task_id", CPU_CORRECTNESS + ["builtin/L1/softmax", "builtin/L1/matmul"])
def test_rendered_candidates_are_correct_on_cuda(cuda_evaluator, task_id):
    task = get_task(task_id)
    plan = plan_task(task, "cuda")
    space = KnobSpace.for_plan(plan)
    rng = random.Random(task_id)
    for action in (space.default(), space.sample(rng)):  # the default and one random configuration
        result = cuda_evaluator.evaluate(task, render_candidate(plan, space.values(action)))
        assert result.correct, (action, result.error_code, result.message, result.compile_log[-1500:],
                                result.runtime_log[-1500:])


@pytest.mark.slow
def test_sweep_checks_correctness_first_and_times_only_in_phase_b(cpu_evaluator):
    from cuda_gym.schedule.sweep import run_sweep
    from cuda_gym.leaderboard.metrics import geomean

    tasks = [get_task(t) for t in ("builtin/L1/gelu", "builtin/L1/argmax_dim", "builtin/L1/cumsum")]
    recorder = RecordingEvaluator(cpu_evaluator)
    phases = []
    rows = run_sweep(recorder, tasks, backend="cpu", time_budget_s=600, tune=0, judge_config=cpu_evaluator.config,
                     write=lambda phase, rows: phases.append(phase), log=lambda line: None)
    # phase A: the check judge (no baselines, one timed call); phase B: the judge given, nothing else
    assert len(recorder.submitted) == 2 and all(c.baselines == () and c.timing_reps == 1 and c.warmup_reps == 0
                                                 and c.correctness_trials == cpu_evaluator.config.correctness_trials
                                                 for c in recorder.submitted)
    assert recorder.evaluated == [cpu_evaluator.config] * 2
    assert phases[0] == "planned" and phases.index("B") > phases.index("A")
    assert "cumsum" in rows["builtin/L1/cumsum"]["not_covered"] and "a_error_code" not in rows["builtin/L1/cumsum"]
    for task_id in ("builtin/L1/gelu", "builtin/L1/argmax_dim"):
        row = rows[task_id]
        assert row["a_correct"] and row["a_check_ms"] > 0, row
        assert not any(key.startswith("a_speedup") for key in row), row  # no speedup without a baseline
        assert row["b_correct"] and row["b_speedup_vs_eager"] > 0 and row["b_eager_ms"] > 0, row
        assert row["b_speedup_vs_compile"] is None  # this judge has no compile baseline
    from cuda_gym.schedule.sweep import summarize

    entry = summarize(rows)["builtin/L1"]
    assert (entry["tasks"], entry["covered"], entry["judged"], entry["correct"], entry["b_correct"]) == (3, 2, 2, 2, 2)
    assert entry["geomean_speedup_vs_eager"] == pytest.approx(
        geomean([rows[t]["b_speedup_vs_eager"] for t in ("builtin/L1/gelu", "builtin/L1/argmax_dim")]))
    assert entry["compile_measured"] == 0 and entry["geomean_speedup_vs_compile"] is None

    # resumed from these rows: nothing is judged again; a row whose knobs differ is judged again
    previous = {task_id: dict(row) for task_id, row in rows.items()}
    previous["builtin/L1/argmax_dim"]["a_knobs"] = {**previous["builtin/L1/argmax_dim"]["a_knobs"], "red_rows": -1}
    again = RecordingEvaluator(cpu_evaluator)
    resumed = run_sweep(again, tasks, backend="cpu", time_budget_s=600, tune=0, judge_config=cpu_evaluator.config,
                        log=lambda line: None, previous=previous)
    assert len(again.submitted) == 1 and len(again.evaluated) == 1  # argmax_dim only, in phase A and B
    assert resumed["builtin/L1/gelu"]["b_ms"] == rows["builtin/L1/gelu"]["b_ms"]
    assert resumed["builtin/L1/argmax_dim"]["a_correct"] and resumed["builtin/L1/argmax_dim"]["b_correct"]

    # a verdict is carried only for the same candidate text: another text (a template changed) or a row
    # without a sha (a result from before the sha was recorded) is judged again
    from cuda_gym.schedule.sweep import carried_fields, source_sha

    gelu = rows["builtin/L1/gelu"]
    source = "the candidate text"
    row = {**gelu, "a_source_sha": source_sha(source)}
    knobs = gelu["a_knobs"]
    assert carried_fields({"t": row}, "t", knobs, set(), "a", source_sha(source))["a_correct"]
    assert carried_fields({"t": row}, "t", knobs, set(), "a", source_sha(source + " ")) == {}
    assert carried_fields({"t": {k: v for k, v in row.items() if k != "a_source_sha"}}, "t", knobs, set(), "a",
                    source_sha(source)) == {}


def test_sweep_cut_by_the_phase_a_share_keeps_every_row():
    from cuda_gym.schedule.sweep import run_sweep, summarize

    tasks = [get_task("builtin/L1/gelu"), get_task("builtin/L1/cumsum")]
    # a judge that never answers: phase A must end at its share of the budget
    rows = run_sweep(NeverDone(), tasks, backend="cpu", time_budget_s=1.0, phase_a_share=0.5, tune=0,
                     log=lambda line: None)
    assert set(rows) == {"builtin/L1/gelu", "builtin/L1/cumsum"}
    assert "phase A" in rows["builtin/L1/gelu"]["a_not_judged"] and "a_error_code" not in rows["builtin/L1/gelu"]
    entry = summarize(rows)["all"]
    assert (entry["covered"], entry["judged"], entry["correct"], entry["b_judged"]) == (1, 0, 0, 0)


# The CUDA implicit-GEMM convolution and transposed-convolution kernels (csrc/templates/conv.cuh) run on the CPU: g++ compiles the
# kernel's own text with a shim in which every CUDA thread of a block is a std::thread, __shared__ is a
# static shared by them and __syncthreads a std::barrier; blocks run one after another. Checked against a
# direct loop (the transposed one against a scatter loop) on 1D/2D/3D shapes with groups, stride, padding,
# dilation and partial tiles, for four tile shapes (16 to 256 threads). A missing barrier or a wrong
# index makes it fail.
_CONV_EMULATION = r'''
#include <barrier>
#include <thread>
#include <vector>
#include <cstdio>
#include "common.h"
struct CgDim3 { unsigned x = 0, y = 0, z = 0; };
thread_local CgDim3 threadIdx;
CgDim3 blockIdx, gridDim;
std::barrier<>* cg_barrier;
#define __global__
#define __device__
#define __launch_bounds__(n)
#define __shared__ static
inline void __syncthreads() { cg_barrier->arrive_and_wait(); }
struct CgConvShape { int64_t n, c, oc, groups, d, h, w, od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw; };
struct Ident { float operator()(float v, int64_t) const { return v; } };
@KERNEL@
template <int BM, int BN, int BK, int TM, int TN> double run(const CgConvShape& s) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups, isp = s.d * s.h * s.w, osp = s.od * s.oh * s.ow;
    const int64_t ksp = s.kd * s.kh * s.kw;
    std::vector<float> x(s.n * s.c * isp), w(s.oc * cg * ksp), y(s.n * s.oc * osp, NAN), r(y.size());
    unsigned state = 1;
    for (auto* v : {&x, &w}) for (auto& e : *v) { state = state * 1664525u + 1013904223u; e = (state >> 8) / 16777216.f - .5f; }
    for (int64_t nb = 0; nb < s.n; ++nb) for (int64_t o = 0; o < s.oc; ++o) for (int64_t oz = 0; oz < s.od; ++oz)
    for (int64_t oy = 0; oy < s.oh; ++oy) for (int64_t ox = 0; ox < s.ow; ++ox) {
        double acc = 0;
        for (int64_t c = 0; c < cg; ++c) for (int64_t kz = 0; kz < s.kd; ++kz) for (int64_t ky = 0; ky < s.kh; ++ky)
        for (int64_t kx = 0; kx < s.kw; ++kx) {
            const int64_t iz = oz * s.sd - s.pd + kz * s.dd, iy = oy * s.sh - s.ph + ky * s.dh, ix = ox * s.sw - s.pw + kx * s.dw;
            if (iz < 0 || iz >= s.d || iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            acc += (double)x[(nb * s.c + o / ocg * cg + c) * isp + (iz * s.h + iy) * s.w + ix] * w[(o * cg + c) * ksp + (kz * s.kh + ky) * s.kw + kx];
        }
        r[(nb * s.oc + o) * osp + (oz * s.oh + oy) * s.ow + ox] = (float)acc;
    }
    constexpr int THREADS = (BM / TM) * (BN / TN);
    gridDim = {(unsigned)((s.n * osp + BM - 1) / BM), (unsigned)((ocg + BN - 1) / BN), (unsigned)s.groups};
    std::barrier<> bar(THREADS);
    cg_barrier = &bar;
    for (unsigned bz = 0; bz < gridDim.z; ++bz) for (unsigned by = 0; by < gridDim.y; ++by) for (unsigned bx = 0; bx < gridDim.x; ++bx) {
        blockIdx = {bx, by, bz};
        std::vector<std::thread> threads;
        for (int t = 0; t < THREADS; ++t)
            threads.emplace_back([&, t] { threadIdx.x = t; cg_conv_kernel<BM, BN, BK, TM, TN, Ident>(x.data(), w.data(), y.data(), s, Ident{}); });
        for (auto& th : threads) th.join();
    }
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::isnan(y[i]) ? INFINITY : std::fmax(err, std::fabs(y[i] - r[i]));
    return err;
}
// The transposed kernel against a scatter loop: input (iz, iy, ix) and tap (kz, ky, kx) add into output
// (i * stride - pad + k * dil) when it lies inside the output (output_padding: a larger od/oh/ow).
template <int BLOCK> double run_transposed(const CgConvShape& s) {
    const int64_t cg = s.c / s.groups, ocg = s.oc / s.groups, isp = s.d * s.h * s.w, osp = s.od * s.oh * s.ow;
    const int64_t ksp = s.kd * s.kh * s.kw;
    std::vector<float> x(s.n * s.c * isp), w(s.c * ocg * ksp), y(s.n * s.oc * osp, NAN);
    std::vector<double> r(y.size(), 0.0);
    unsigned state = 7;
    for (auto* v : {&x, &w}) for (auto& e : *v) { state = state * 1664525u + 1013904223u; e = (state >> 8) / 16777216.f - .5f; }
    for (int64_t nb = 0; nb < s.n; ++nb) for (int64_t ci = 0; ci < s.c; ++ci) for (int64_t og = 0; og < ocg; ++og)
    for (int64_t iz = 0; iz < s.d; ++iz) for (int64_t iy = 0; iy < s.h; ++iy) for (int64_t ix = 0; ix < s.w; ++ix)
    for (int64_t kz = 0; kz < s.kd; ++kz) for (int64_t ky = 0; ky < s.kh; ++ky) for (int64_t kx = 0; kx < s.kw; ++kx) {
        const int64_t oz = iz * s.sd - s.pd + kz * s.dd, oy = iy * s.sh - s.ph + ky * s.dh, ox = ix * s.sw - s.pw + kx * s.dw;
        if (oz < 0 || oz >= s.od || oy < 0 || oy >= s.oh || ox < 0 || ox >= s.ow) continue;
        const int64_t o = ci / cg * ocg + og;
        r[(nb * s.oc + o) * osp + (oz * s.oh + oy) * s.ow + ox] +=
            (double)x[(nb * s.c + ci) * isp + (iz * s.h + iy) * s.w + ix] * w[(ci * ocg + og) * ksp + (kz * s.kh + ky) * s.kw + kx];
    }
    gridDim = {(unsigned)((y.size() + BLOCK - 1) / BLOCK), 1, 1};
    for (unsigned bx = 0; bx < gridDim.x; ++bx) {
        blockIdx = {bx, 0, 0};
        std::vector<std::thread> threads;
        for (int t = 0; t < BLOCK; ++t)
            threads.emplace_back([&, t] { threadIdx.x = t; cg_conv_transpose_kernel<BLOCK, Ident>(x.data(), w.data(), y.data(), s, Ident{}); });
        for (auto& th : threads) th.join();
    }
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::isnan(y[i]) ? INFINITY : std::fmax(err, std::fabs(y[i] - r[i]));
    return err;
}
int main() {
    const CgConvShape transposed[] = {  // 2D with groups and output_padding, 3D with dilation > stride, 1D
        {2, 4, 6, 2, 1, 5, 4, 1, 10, 12, 1, 3, 2, 1, 2, 3, 0, 1, 0, 1, 1, 2},
        {1, 3, 2, 1, 3, 3, 2, 5, 11, 4, 3, 3, 3, 2, 2, 1, 1, 0, 1, 1, 3, 2},
        {2, 5, 7, 1, 1, 1, 9, 1, 1, 27, 1, 1, 4, 1, 1, 3, 0, 0, 2, 1, 1, 2},
    };
    double worst_transposed = 0;
    for (const auto& s : transposed) worst_transposed = std::fmax(worst_transposed, run_transposed<64>(s));
    const CgConvShape shapes[] = {  // n, c, oc, groups, d, h, w, od, oh, ow, kernel, stride, padding, dilation
        {2, 6, 10, 2, 1, 9, 7, 1, 5, 5, 1, 3, 2, 1, 2, 1, 0, 1, 0, 1, 1, 2},
        {1, 3, 4, 1, 5, 6, 4, 3, 3, 2, 3, 2, 3, 1, 2, 1, 0, 0, 0, 1, 1, 1},
        {3, 5, 37, 1, 1, 1, 40, 1, 1, 42, 1, 1, 3, 1, 1, 1, 0, 0, 2, 1, 1, 1},
    };
    double worst = 0;
    for (const auto& s : shapes)
        for (double e : {run<32, 32, 8, 8, 8>(s), run<64, 64, 16, 4, 4>(s), run<128, 32, 32, 4, 8>(s), run<32, 128, 8, 4, 4>(s)})
            worst = std::fmax(worst, e);
    printf("max_abs_error %.3g %.3g\n", worst, worst_transposed);
    return 0;
}
'''


def test_cuda_conv_kernel_emulated_on_cpu(tmp_path):
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    text = (template_dir() / "conv.cuh").read_text()
    kernels = [text[text.index(first):text.index(launcher)] for first, launcher in (
        ("#define CG_CONV_OUTSIDE", "template <int BM, int BN, int BK, int TM, int TN, class E>\nint cg_conv("),
        ("struct CgTapAxis", "template <int BLOCK, class E>\nint cg_conv_transpose("))]
    source = tmp_path / "conv_emulation.cpp"
    source.write_text(_CONV_EMULATION.replace("@KERNEL@", "\n".join(kernels)))
    binary = tmp_path / "conv_emulation"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"-I{template_dir()}", str(source), "-o", str(binary)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    errors = [float(v) for v in run.stdout.split()[1:]]
    assert len(errors) == 2 and max(errors) < 1e-4, run.stdout  # implicit GEMM, transposed


def test_cuda_convs_default_to_cudnn_and_the_source_compiles(tmp_path):
    """A conv's default on CUDA is cuDNN + one epilogue pass (backward data for a transposed one); the
    template kernels stay a knob value. nvcc (no GPU needed) compiles the rendered source when it is installed."""
    import shutil
    import subprocess

    plan = plan_task(get_task("builtin/L2/conv2d_group_norm_tanh"), "cuda")
    space = KnobSpace.for_plan(plan)
    impl = [k.name for k in space.knobs].index("conv_impl")
    assert space.masks[impl] == [True, True] and space.values(space.default())["conv_impl"] == "cudnn"
    source, _, _, _ = render_kernels(plan, space.values(space.default()))
    assert "cg_conv_cudnn<256" in source and "cudnnConvolutionForward" in source
    action = list(space.default())
    action[impl] = 0
    template_source, _, _, _ = render_kernels(plan, space.values(tuple(action)))
    assert "cg_conv_cudnn" not in template_source and "cg_conv<" in template_source
    # where cuDNN refuses a shape, the template kernel runs instead (same call site)
    assert "cg_cudnn_or(cg_conv_cudnn<256" in source and "[&] { return cg_conv<" in source
    transposed = plan_task(get_task("builtin/L1/conv_transpose2d"), "cuda")
    tspace = KnobSpace.for_plan(transposed)
    transposed_source, _, _, _ = render_kernels(transposed, tspace.values(tspace.default()))
    assert "cg_conv_transpose_cudnn<256" in transposed_source and "return cg_conv_transpose<" in transposed_source
    # plans with no conv never see the knob
    gelu = KnobSpace.for_plan(plan_task(get_task("builtin/L1/gelu"), "cuda"))
    assert sum(gelu.masks[[k.name for k in gelu.knobs].index("conv_impl")]) == 1
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    pool = plan_task(get_task("builtin/L1/max_pool2d"), "cuda")
    pool_source, _, _, _ = render_kernels(pool, KnobSpace.for_plan(pool).values(KnobSpace.for_plan(pool).default()))
    assert "cg_pool<256, true, Pool_s0>" in pool_source and "kd = 1, kh = 3, kw = 3" in pool_source  # compile-time geometry
    for name, text in (("conv", source), ("conv_transpose", transposed_source), ("pool", pool_source)):
        path = tmp_path / f"{name}.cu"
        path.write_text(text)
        build = subprocess.run(["nvcc", "-std=c++17", "-c", str(path), "-o", str(tmp_path / f"{name}.o")],
                               capture_output=True, text=True, timeout=300)
        assert build.returncode == 0, (name, build.stderr[-3000:])


_SCALAR_CONSTANT_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, constant_value):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3)
        self.constant_value = constant_value

    def forward(self, x):
        return torch.min(self.conv(x), torch.tensor(self.constant_value)) * 2.0


def get_inputs():
    return [torch.randn(2, 8, 10, 10)]


def get_init_inputs():
    return [8, 0.25]
'''


def test_a_scalar_tensor_built_in_the_forward_is_inlined(cpu_evaluator):
    """`torch.tensor(self.value)` in the forward (KernelBench L2/31) becomes fx's `_tensor_constant0`,
    which the emitted ModelNew does not have: the planner inlines it as a constant."""
    from cuda_gym.tasks import task_from_source

    task = task_from_source(_SCALAR_CONSTANT_TASK, task_id="test/L2/conv_min_constant", level=2,
                            name="conv_min_constant")
    plan = plan_task(task, "cpu")
    assert plan.stage_kinds == ["conv"] and ("c", 0.25) in plan.stages[0].epilogue[2]
    source = render_candidate(plan, KnobSpace.for_plan(plan).values(KnobSpace.for_plan(plan).default()))
    assert "_tensor_constant" not in source
    result = cpu_evaluator.evaluate(task, source)
    assert result.correct, (result.error_code, result.message)


# The CUDA pooling kernel compiled by g++ and run on the CPU: blocks and threads one after another
# (the kernel has no barrier), against a direct loop over each output's window, for max (with dilation)
# and average pooling (with and without count_include_pad) in 1, 2 and 3 spatial dimensions, with
# padding, strides past the window and planes split over several blocks of a grid narrower than the
# planes (so the grid-stride loops are exercised).
_POOL_EMULATION = r'''
#include <algorithm>
#include <cstdio>
#include <vector>
#include "common.h"
struct CgDim3 { unsigned x = 0, y = 0, z = 0; };
CgDim3 threadIdx, blockIdx, gridDim;
#define __global__
#define __launch_bounds__(n)
#define __ldg(p) (*(p))
using std::min;
struct CgConvShape { int64_t n, c, oc, groups, d, h, w, od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw; };
struct Ident { float operator()(float v, int64_t) const { return v; } };
@KERNEL@
// The renderer's struct (n, c: the planes) and the run-time shape the reference loop reads.
#define GEOMETRY(name, n_, c_, d_, h_, w_, od_, oh_, ow_, kd_, kh_, kw_, sd_, sh_, sw_, pd_, ph_, pw_, dd_, dh_, dw_) \
    struct name { static constexpr int d = d_, h = h_, w = w_, od = od_, oh = oh_, ow = ow_, kd = kd_, kh = kh_, kw = kw_, \
                  sd = sd_, sh = sh_, sw = sw_, pd = pd_, ph = ph_, pw = pw_, dd = dd_, dh = dh_, dw = dw_; \
                  static constexpr CgConvShape shape{n_, c_, c_, 1, d_, h_, w_, od_, oh_, ow_, kd_, kh_, kw_, sd_, sh_, sw_, \
                                                     pd_, ph_, pw_, dd_, dh_, dw_}; };
GEOMETRY(Max2d, 2, 3, 1, 17, 19, 1, 7, 8, 1, 3, 3, 1, 2, 2, 0, 1, 1, 1, 2, 2)      // dilation 2
GEOMETRY(Max3d, 1, 5, 6, 7, 5, 3, 4, 3, 2, 2, 2, 2, 2, 2, 0, 1, 1, 1, 1, 1)
GEOMETRY(Avg2d, 3, 2, 1, 20, 21, 1, 20, 21, 1, 3, 3, 1, 1, 1, 0, 1, 1, 1, 1, 1)    // 3x3, stride 1, pad 1
GEOMETRY(Avg1d, 2, 4, 1, 1, 70, 1, 1, 71, 1, 1, 8, 1, 1, 1, 0, 0, 4, 1, 1, 1)      // KernelBench L1/44's form
GEOMETRY(Avg3d, 1, 3, 9, 8, 10, 5, 4, 5, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1)
template <bool IS_MAX, class S> double run(bool include) {
    const CgConvShape s = S::shape;
    const int64_t planes = s.n * s.c, isp = s.d * s.h * s.w, osp = s.od * s.oh * s.ow;
    std::vector<float> x(planes * isp), y(planes * osp, NAN), r(y.size());
    unsigned state = 3;
    for (auto& e : x) { state = state * 1664525u + 1013904223u; e = (state >> 8) / 16777216.f - .5f; }
    for (int64_t p = 0; p < planes; ++p) for (int64_t oz = 0; oz < s.od; ++oz) for (int64_t oy = 0; oy < s.oh; ++oy)
    for (int64_t ox = 0; ox < s.ow; ++ox) {
        double acc = IS_MAX ? -INFINITY : 0.0;
        int64_t counted = 0, padded = 0;
        for (int64_t kz = 0; kz < s.kd; ++kz) for (int64_t ky = 0; ky < s.kh; ++ky) for (int64_t kx = 0; kx < s.kw; ++kx) {
            const int64_t iz = oz * s.sd - s.pd + kz * s.dd, iy = oy * s.sh - s.ph + ky * s.dh, ix = ox * s.sw - s.pw + kx * s.dw;
            if (iz < s.d + s.pd && iy < s.h + s.ph && ix < s.w + s.pw) ++padded;  // inside the padded input
            if (iz < 0 || iz >= s.d || iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
            const double v = x[p * isp + (iz * s.h + iy) * s.w + ix];
            acc = IS_MAX ? std::max(acc, v) : acc + v;
            ++counted;
        }
        if (!IS_MAX) acc /= (double)(include ? padded : counted);
        r[p * osp + (oz * s.oh + oy) * s.ow + ox] = (float)acc;
    }
    constexpr int BLOCK = 64;
    gridDim = {(unsigned)std::max<int64_t>(1, (osp + BLOCK - 1) / BLOCK / 2), (unsigned)std::max<int64_t>(1, planes / 2), 1};
    for (unsigned by = 0; by < gridDim.y; ++by) for (unsigned bx = 0; bx < gridDim.x; ++bx) for (int t = 0; t < BLOCK; ++t) {
        blockIdx = {bx, by, 0};
        threadIdx = {(unsigned)t, 0, 0};
        cg_pool_kernel<BLOCK, IS_MAX, S, Ident>(x.data(), y.data(), planes, include, Ident{});
    }
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::isnan(y[i]) ? INFINITY : std::fmax(err, std::fabs(y[i] - r[i]));
    return err;
}
int main() {
    double worst = 0;
    for (double e : {run<true, Max2d>(false), run<true, Max3d>(false), run<false, Avg2d>(true), run<false, Avg2d>(false),
                     run<false, Avg1d>(true), run<false, Avg3d>(false), run<false, Avg3d>(true)})
        worst = std::fmax(worst, e);
    printf("max_abs_error %.3g\n", worst);
    return 0;
}
'''


def test_cuda_pool_kernel_emulated_on_cpu(tmp_path):
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    text = (template_dir() / "conv.cuh").read_text()
    kernel = text[text.index("template <class S> struct CgPoolWork"):
                  text.index("// S must describe s")]
    source = tmp_path / "pool_emulation.cpp"
    source.write_text(_POOL_EMULATION.replace("@KERNEL@", kernel))
    binary = tmp_path / "pool_emulation"
    build = subprocess.run(["g++", "-std=c++20", "-O1", f"-I{template_dir()}", str(source), "-o", str(binary)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[1]) < 1e-5, run.stdout


# The CUDA row kernels (normalisations and the one-pass logsumexp) compiled by g++ and run on the CPU:
# each CUDA thread of a block is a std::thread, __syncthreads a block barrier and a warp shuffle a
# write-barrier-read-barrier on the warp's own barrier; blocks run one after another. Checked against
# float64 loops for softmax, log-softmax, layer norm with affine groups (group norm's form) and RMS norm,
# rows kept in shared memory and rows too long for it, vector widths 1 and 4, more rows than blocks,
# rows holding -inf (masked softmax entries), few long rows split over blocks (three launches), and
# prologues that use the index (normalisations, cached or not, split or not, logsumexp, max and sum rows).
_ROW_EMULATION = r'''
#include <barrier>
#include <cstdio>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>
#include "common.h"
struct CgDim3 { unsigned x = 0, y = 0, z = 0; };
thread_local CgDim3 threadIdx;
CgDim3 blockIdx, gridDim;
std::barrier<>* cg_barrier;
std::vector<std::barrier<>*> cg_warp_barriers;
float cg_lanes[1024];
float* cg_dynamic_smem;
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
#define __global__
#define __device__
#define __launch_bounds__(n)
#define __shared__ static
inline void __syncthreads() { cg_barrier->arrive_and_wait(); }
inline float rsqrtf(float x) { return 1.f / std::sqrt(x); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
    const unsigned t = threadIdx.x;
    cg_lanes[t] = v;
    cg_warp_barriers[t / 32]->arrive_and_wait();
    const float w = cg_lanes[t ^ o];
    cg_warp_barriers[t / 32]->arrive_and_wait();
    return w;
}
struct Ident { float operator()(float v, int64_t) const { return v; } };
struct Prologue { float operator()(float v, int64_t i) const { return 0.5f * v + (float)(i % 3); } };
@KERNEL@
// Runs body() as every thread of every block of `grid`, one block after another (with the block's and
// its warps' barriers).
template <int BLOCK, class Body> void launch(CgDim3 grid, Body body) {
    std::barrier<> bar(BLOCK);
    cg_barrier = &bar;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    cg_warp_barriers.clear();
    for (int w = 0; w < BLOCK / 32; ++w) {
        warps.push_back(std::make_unique<std::barrier<>>(32));
        cg_warp_barriers.push_back(warps.back().get());
    }
    gridDim = grid;
    for (unsigned by = 0; by < grid.y; ++by) for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = {bx, by, 0};
        std::vector<std::thread> threads;
        for (int t = 0; t < BLOCK; ++t) threads.emplace_back([&, t] { threadIdx.x = t; body(); });
        for (auto& th : threads) th.join();
    }
}
template <int BLOCK, int V, int KIND, bool CACHED, bool PRO = false>
double run(int64_t outer, int64_t R, bool masked, bool affine, bool logsumexp = false, int64_t split = 0) {
    using Pro = std::conditional_t<PRO, Prologue, Ident>;  // the normalisation's prologue
    std::vector<float> x(outer * R), y(logsumexp ? outer : outer * R, NAN), g(R), b(R);
    unsigned state = 11;
    auto next = [&] { state = state * 1664525u + 1013904223u; return (state >> 8) / 16777216.f - .5f; };
    for (auto& e : x) e = 4.f * next() + 1.5f;  // an offset: the shifted sums must not cancel
    for (auto* v : {&g, &b}) for (auto& e : *v) e = next();
    if (masked) for (int64_t i = 0; i < (int64_t)x.size(); i += 7) x[i] = -INFINITY;
    const int64_t groups = 2, group_size = R / 4;  // affine index (row % 2) * (R / 4) + r / 2
    CgAffine aff{affine ? g.data() : nullptr, affine ? b.data() : nullptr, groups, group_size, 2};
    std::vector<float> smem(CACHED ? R + 4 : 0);
    cg_dynamic_smem = smem.data();
    // the split path's three launches: chunk pairs, row coefficients, output (a grid narrower than the work)
    const int64_t chunks = split ? (R + split - 1) / split : 0;
    std::vector<CgPair> partial(outer * chunks);
    std::vector<float2> coef(outer);
    if (split) {
        launch<BLOCK>({(unsigned)chunks, (unsigned)outer, 1}, [&] {
            cg_normalize_chunks<BLOCK, V, KIND, Pro>(x.data(), partial.data(), R, split, Pro{}); });
        launch<BLOCK>({(unsigned)outer, 1, 1}, [&] {
            cg_normalize_coefficients<BLOCK, KIND, Pro>(x.data(), partial.data(), coef.data(), chunks, R, 1e-5f, Pro{}); });
        launch<BLOCK>({3, 1, 1}, [&] {
            cg_normalize_apply<BLOCK, V, KIND, Pro, Ident>(x.data(), y.data(), coef.data(), outer, R, aff, Pro{}, Ident{}); });
    } else {  // more rows than blocks: the grid-stride loop
        launch<BLOCK>({(unsigned)(outer > 3 ? outer / 2 : outer), 1, 1}, [&] {
            if (logsumexp)
                cg_reduce_rows<BLOCK, V, CG_LOGSUMEXP, Prologue, Ident>(x.data(), y.data(), outer, R, Prologue{}, Ident{});
            else cg_normalize_rows<BLOCK, V, KIND, CACHED, Pro, Ident>(x.data(), y.data(), outer, R, 1e-5f, aff, Pro{},
                                                                      Ident{});
        });
    }
    double err = 0;
    std::vector<float> xv(x);  // what is normalised: the prologue's values
    if (PRO && !logsumexp) for (int64_t i = 0; i < (int64_t)x.size(); ++i) xv[i] = Prologue{}(x[i], i);
    for (int64_t o = 0; o < outer; ++o) {
        const float* row = (logsumexp ? x : xv).data() + o * R;
        double m = -INFINITY, s = 0, mean = 0, sq = 0;
        for (int64_t r = 0; r < R; ++r) m = std::max(m, (double)row[r]);
        for (int64_t r = 0; r < R; ++r) { s += std::exp(row[r] - m); mean += row[r]; }
        mean /= R;
        for (int64_t r = 0; r < R; ++r) sq += KIND == CG_RMS_NORM ? (double)row[r] * row[r] : (row[r] - mean) * (row[r] - mean);
        const double scale = 1.0 / std::sqrt(sq / R + 1e-5);
        if (logsumexp) {  // of the prologue's values
            double lm = -INFINITY, ls = 0;
            for (int64_t r = 0; r < R; ++r) lm = std::max(lm, (double)Prologue{}(row[r], o * R + r));
            for (int64_t r = 0; r < R; ++r) ls += std::exp(Prologue{}(row[r], o * R + r) - lm);
            err = std::fmax(err, std::fabs(y[o] - (std::log(ls) + lm)));
            continue;
        }
        for (int64_t r = 0; r < R; ++r) {
            double want;
            if (KIND == CG_SOFTMAX) want = std::exp(row[r] - m) / s;
            else if (KIND == CG_LOG_SOFTMAX) want = row[r] - m - std::log(s);
            else {
                want = (row[r] - (KIND == CG_RMS_NORM ? 0.0 : mean)) * scale;
                if (affine) { const int64_t k = (o % groups) * group_size + r / 2; want = want * g[k] + b[k]; }
            }
            const float got = y[o * R + r];
            if (std::isinf(want) && got == want) continue;
            err = std::isnan(got) ? INFINITY : std::fmax(err, std::fabs(got - want) / (1.0 + std::fabs(want)));
        }
    }
    return err;
}
// A plain reduction of rows (cg_row_pass, cg_block_reduce) through the prologue, against a loop.
template <int BLOCK, int V, int KIND> double run_reduce(int64_t outer, int64_t R) {
    std::vector<float> x(outer * R), y(outer, NAN);
    unsigned state = 5;
    for (auto& e : x) { state = state * 1664525u + 1013904223u; e = (state >> 8) / 16777216.f - .5f; }
    launch<BLOCK>({(unsigned)(outer > 3 ? outer / 2 : outer), 1, 1}, [&] {
        cg_reduce_rows<BLOCK, V, KIND, Prologue, Ident>(x.data(), y.data(), outer, R, Prologue{}, Ident{}); });
    double err = 0;
    for (int64_t o = 0; o < outer; ++o) {
        double want = KIND == CG_MAX ? -INFINITY : 0.0;
        for (int64_t r = 0; r < R; ++r) {
            const double v = Prologue{}(x[o * R + r], o * R + r);
            want = KIND == CG_MAX ? std::max(want, v) : want + v;
        }
        err = std::isnan(y[o]) ? INFINITY : std::fmax(err, std::fabs(y[o] - want) / (1.0 + std::fabs(want)));
    }
    return err;
}
int main() {
    double worst = 0;
    for (double e : {run_reduce<64, 4, CG_MAX>(5, 1500), run_reduce<32, 1, CG_SUM>(3, 777),
                     run<64, 4, CG_SOFTMAX, true>(5, 1000, true, false), run<32, 4, CG_SOFTMAX, true>(3, 2000, true, false),
                     run<32, 2, CG_LAYER_NORM, true>(3, 1030, false, true), run<64, 4, CG_SOFTMAX, false>(3, 4100, false, false),
                     run<128, 1, CG_LOG_SOFTMAX, true>(4, 333, true, false), run<64, 4, CG_LOG_SOFTMAX, false>(2, 2048, false, false),
                     run<64, 4, CG_LAYER_NORM, true>(6, 512, false, true), run<256, 1, CG_LAYER_NORM, false>(3, 3001, false, false),
                     run<64, 4, CG_RMS_NORM, true>(4, 256, false, true), run<32, 2, CG_RMS_NORM, false>(5, 998, false, false),
                     run<64, 4, CG_SOFTMAX, false>(7, 700, true, false, true),
                     run<64, 4, CG_LAYER_NORM, false>(3, 4096, false, true, false, 1024), run<32, 1, CG_SOFTMAX, false>(2, 999, true, false, false, 200),
                     run<64, 2, CG_LOG_SOFTMAX, false>(2, 3000, false, false, false, 512), run<64, 4, CG_RMS_NORM, false>(2, 2048, false, true, false, 768),
                     run<64, 4, CG_LAYER_NORM, true, true>(4, 600, false, true), run<64, 4, CG_SOFTMAX, false, true>(3, 1500, false, false),
                     run<32, 2, CG_LAYER_NORM, false, true>(2, 2000, false, false, false, 256)})
        worst = std::fmax(worst, e);
    printf("max_error %.3g\n", worst);
    return 0;
}
'''


@pytest.mark.slow
def test_cuda_row_kernels_emulated_on_cpu(tmp_path):
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    text = (template_dir() / "reduce.cuh").read_text()
    kernels = [text[text.index(first):text.index(last)] for first, last in (
        ("enum { CG_SUM", "template <int BLOCK, int KIND, class P, class E>\n__global__ void __launch_bounds__(BLOCK) cg_reduce_cols"),
        ("struct CgAffine", "template <int BLOCK, int KIND, class P, class E>\n__global__ void __launch_bounds__(BLOCK) cg_normalize_cols"))]
    kernel = "\n".join(kernels).replace("extern __shared__ float4 cg_row_smem[];",
                                         "float4* cg_row_smem = reinterpret_cast<float4*>(cg_dynamic_smem);")
    source = tmp_path / "row_emulation.cpp"
    source.write_text(_ROW_EMULATION.replace("@KERNEL@", kernel))
    binary = tmp_path / "row_emulation"
    build = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", f"-I{template_dir()}", str(source), "-o", str(binary)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert float(run.stdout.split()[1]) < 2e-5, run.stdout
