"""The leaderboard: metrics checked by hand, submission layouts, trajectories, hidden seed, outputs."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from cuda_gym.trajectory import Trajectory, Turn, write_trajectories
from cuda_gym.cli import main
from cuda_gym.leaderboard import (Row, SubmissionError, group_metrics, leaderboard_metrics, load_leaderboard,
                                  read_submissions, run_leaderboard, write_leaderboard)
from cuda_gym.leaderboard.metrics import MISSING
from cuda_gym.tasks import get_task, solution_path
from tests.fakes import SeedRecordingEvaluator
from tests.helpers import CORRECT_BODY, native_candidate

# ------------------------------------------------------------------------------------ metrics

HAND_ROWS = [
    Row("s/L1/a", 1, "OK", True, 2.0, 1.1),
    Row("s/L1/b", 1, "OK", True, 0.5, 0.4),
    Row("s/L1/c", 1, "INCORRECT", False, None, None),
    Row("s/L2/d", 2, "OK", True, 1.2, None),  # correct, but its compile baseline was not measured
    Row("s/L2/e", 2, MISSING, False, None, None),
]


def test_metrics_match_the_numbers_worked_out_by_hand():
    summary = leaderboard_metrics(HAND_ROWS)
    overall = summary["overall"]
    assert (overall["tasks"], overall["submitted"], overall["correct"]) == (5, 4, 3)
    assert overall["pass_rate"] == pytest.approx(3 / 5)
    assert overall["verdicts"] == {"INCORRECT": 1, "MISSING": 1, "OK": 3}
    # speedups vs eager 2.0, 0.5, 1.2 over 5 tasks; "faster than p" is strict (2.0 is not > 2.0)
    assert overall["fast_p"]["eager"] == pytest.approx(
        {"0": 3 / 5, "1.0": 2 / 5, "1.05": 2 / 5, "1.2": 1 / 5, "1.5": 1 / 5, "2.0": 0.0})
    # vs compile only a (1.1) and b (0.4) were measured
    assert overall["fast_p"]["compile"] == pytest.approx(
        {"0": 2 / 5, "1.0": 1 / 5, "1.05": 1 / 5, "1.2": 0.0, "1.5": 0.0, "2.0": 0.0})
    assert overall["geomean_correct"]["eager"] == pytest.approx((2.0 * 0.5 * 1.2) ** (1 / 3))
    assert overall["geomean_correct"]["compile"] == pytest.approx((1.1 * 0.4) ** (1 / 2))
    assert overall["geomean_all"]["eager"] == pytest.approx((2.0 * 0.5 * 1.2 * 1 * 1) ** (1 / 5))
    assert overall["geomean_all"]["compile"] == pytest.approx((1.1 * 0.4 * 1 * 1 * 1) ** (1 / 5))
    assert list(summary) == ["overall", "L1", "L2"]
    level2 = summary["L2"]
    assert (level2["tasks"], level2["correct"], level2["pass_rate"]) == (2, 1, 0.5)
    assert level2["fast_p"]["eager"]["1.0"] == 0.5 and level2["fast_p"]["compile"]["0"] == 0.0
    assert level2["geomean_correct"]["compile"] is None


def test_failure_speedup_and_unmeasured_baselines():
    metrics = group_metrics(HAND_ROWS, failure_speedup=0.5, measured=("eager",))
    assert metrics["geomean_all"]["eager"] == pytest.approx((2.0 * 0.5 * 1.2 * 0.5 * 0.5) ** (1 / 5))
    assert metrics["fast_p"]["compile"] is None and metrics["geomean_all"]["compile"] is None
    with pytest.raises(ValueError, match="failure_speedup"):
        group_metrics(HAND_ROWS, failure_speedup=0)
    # an incorrect row's speedup never counts, whatever it holds
    assert Row("x", 1, "INCORRECT", False, 9.0, 9.0).speedup("eager") is None


# -------------------------------------------------------------------------------- submissions

TASK_IDS = ["builtin/L1/gelu", "builtin/L1/softmax", "builtin/L1/sum_dim", "builtin/L1/cumsum",
            "builtin/L2/bias_scale_sigmoid"]


@pytest.fixture(scope="module")
def tasks():
    return [get_task(task_id) for task_id in TASK_IDS]


def test_folder_layouts_ours_and_kernelbench(tmp_path, tasks):
    (tmp_path / "L1").mkdir()
    (tmp_path / "level2").mkdir()
    (tmp_path / "L1" / "gelu.py").write_text("a")
    (tmp_path / "level2" / "bias_scale_sigmoid.py").write_text("b")
    (tmp_path / "L1" / "no_such_task.py").write_text("c")
    (tmp_path / "notes").mkdir()
    found = read_submissions(tmp_path, tasks)
    assert {k: v.source for k, v in found.by_task.items()} == {"builtin/L1/gelu": "a",
                                                               "builtin/L2/bias_scale_sigmoid": "b"}
    assert len(found.unmatched) == 1 and "no_such_task" in found.unmatched[0]
    (tmp_path / "level1").mkdir()
    (tmp_path / "level1" / "gelu.py").write_text("again")
    with pytest.raises(SubmissionError, match="two candidates for builtin/L1/gelu"):
        read_submissions(tmp_path, tasks)


def test_bad_submission_paths_say_what_to_do(tmp_path, tasks):
    with pytest.raises(SubmissionError, match="does not exist"):
        read_submissions(tmp_path / "nope", tasks)
    with pytest.raises(SubmissionError, match="L<level>"):
        read_submissions(tmp_path, tasks)  # an empty folder
    (tmp_path / "bad.jsonl").write_text('{"task_id": "builtin/L1/gelu"}\n')
    with pytest.raises(SubmissionError, match="bad.jsonl:1"):
        read_submissions(tmp_path / "bad.jsonl", tasks)


def _turn(index, command, code, candidate=None, eager=None, compile_=None):
    return Turn(index=index, messages=[], reply="", command=command, observation="", reward=0.0, error_code=code,
                candidate=candidate, speedup_vs_eager=eager, speedup_vs_compile=compile_)


def test_trajectories_best_of_each_and_best_trajectory_per_task(tmp_path, tasks):
    trajectories = [
        Trajectory("builtin/L1/gelu", 1, 0, "scripted", "m", turns=[
            _turn(1, "eval", "OK", "gelu-slow", 0.5, 0.4), _turn(2, "eval", "INCORRECT", "gelu-wrong")]),
        Trajectory("builtin/L1/gelu", 1, 1, "scripted", "m", turns=[
            _turn(1, "eval", "OK", "gelu-fast", 1.5, 1.2), _turn(2, "check", "OK", "gelu-checked")]),
        Trajectory("builtin/L1/softmax", 1, 0, "scripted", "m", turns=[
            _turn(1, None, "INVALID_ACTION")]),
        Trajectory("builtin/L3/mlp", 3, 0, "scripted", "m", turns=[_turn(1, "eval", "OK", "mlp", 1.0, 1.0)]),
    ]
    path = tmp_path / "trajectories.jsonl"
    write_trajectories(path, trajectories)
    found = read_submissions(path, tasks)
    assert found.kind == "trajectories"
    assert found.by_task["builtin/L1/gelu"].source == "gelu-fast"
    assert "episode 1, turn 1" in found.by_task["builtin/L1/gelu"].origin
    assert found.by_task["builtin/L1/softmax"].source is None  # judged as a failure, not dropped
    assert len(found.unmatched) == 1 and "builtin/L3/mlp" in found.unmatched[0]


# ----------------------------------------------------------------------------- hidden seed

def test_each_run_draws_its_own_secret_seed_and_hands_it_to_the_evaluator(tmp_path, tasks):
    (tmp_path / "L1").mkdir()
    (tmp_path / "L1" / "gelu.py").write_text("x")
    (tmp_path / "L1" / "softmax.py").write_text("y")
    submissions = read_submissions(tmp_path, tasks)
    records, evaluators = [], []
    for _ in range(2):
        evaluators.append(SeedRecordingEvaluator())
        records.append(run_leaderboard(submissions, tasks, evaluators[-1], progress=False))
    for record, evaluator in zip(records, evaluators):
        assert record["seed"]["mode"] == "secret"
        assert evaluator.seeds == [record["seed"]["value"]] * 2  # every candidate judged under the run's seed
        assert evaluator.seeds[0] != 0  # never the public default
    assert records[0]["seed"]["value"] != records[1]["seed"]["value"]
    given = SeedRecordingEvaluator()
    record = run_leaderboard(submissions, tasks, given, seed=1234, progress=False)
    assert record["seed"] == {"value": 1234, "mode": "given"} and given.seeds == [1234, 1234]


# --------------------------------------------------------------------- the real thing, on CPU

SLOW_GELU = native_candidate("for (int rep = 0; rep < 2; ++rep) {\n" + CORRECT_BODY + "\n}")
BROKEN_BUILD = native_candidate("this is not C++;")
WRONG_SUM = '''
import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(cpp=r"""
#include <cstdint>
extern "C" void half_sum(const float* x, float* y, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int64_t c = 0; c < cols / 2; ++c) s += x[r * cols + c];   // deliberately wrong: half the row
        y[r] = static_cast<float>(s);
    }
}
""", functions=["void half_sum(const float* x, float* y, int64_t rows, int64_t cols)"])


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        _lib.half_sum(x, y, x.numel() // x.size(-1), x.size(-1))
        return y
'''


def test_leaderboard_on_cpu_solutions_wrong_slow_broken_and_missing(tmp_path, tasks, cpu_evaluator):
    folder = tmp_path / "submissions"
    (folder / "L1").mkdir(parents=True)
    (folder / "L2").mkdir()
    (folder / "L1" / "softmax.py").write_text(solution_path(get_task("builtin/L1/softmax"), "cpu").read_text())
    (folder / "L1" / "gelu.py").write_text(SLOW_GELU)
    (folder / "L1" / "sum_dim.py").write_text(WRONG_SUM)
    (folder / "L2" / "bias_scale_sigmoid.py").write_text(BROKEN_BUILD)
    (folder / "L2" / "not_a_task.py").write_text("pass")
    # builtin/L1/cumsum has no submission
    submissions = read_submissions(folder, tasks)
    log = tmp_path / "eval_results.jsonl"
    record = run_leaderboard(submissions, tasks, cpu_evaluator, name="mixed", origin=str(folder), suite="tasks",
                             progress=False, results_log=log)
    logged = [json.loads(line) for line in log.read_text().splitlines()]  # each verdict as it came in
    assert sorted(e["task_id"] for e in logged) == sorted(record["eval_results"])
    assert {e["seed"] for e in logged} == {record["seed"]["value"]}
    verdicts = {e["task_id"]: e["verdict"] for e in record["results"]}
    assert verdicts == {"builtin/L1/softmax": "OK", "builtin/L1/gelu": "OK", "builtin/L1/sum_dim": "INCORRECT",
                        "builtin/L1/cumsum": "MISSING", "builtin/L2/bias_scale_sigmoid": "COMPILE_ERROR"}
    speedup = {e["task_id"]: e["speedup_vs_eager"] for e in record["results"]}
    softmax, gelu = speedup["builtin/L1/softmax"], speedup["builtin/L1/gelu"]
    assert gelu < 1.0  # scalar erf, twice, on one thread: slower than eager by construction
    assert softmax > 0
    overall, level1, level2 = (record["summary"][k] for k in ("overall", "L1", "L2"))
    assert (overall["tasks"], overall["submitted"], overall["correct"]) == (5, 4, 2)
    assert overall["pass_rate"] == pytest.approx(2 / 5) and level1["pass_rate"] == pytest.approx(2 / 4)
    assert level2["pass_rate"] == 0.0 and level2["verdicts"] == {"COMPILE_ERROR": 1}
    fast = overall["fast_p"]["eager"]
    assert fast["0"] == pytest.approx(2 / 5)
    for p in (1.0, 1.05, 1.2, 1.5, 2.0):  # the slow gelu never counts; softmax counts when it beat eager by p
        assert fast[repr(p)] == pytest.approx((softmax > p) / 5)
    assert overall["fast_p"]["compile"] is None  # the test evaluator times eager only
    assert overall["geomean_correct"]["eager"] == pytest.approx(math.sqrt(softmax * gelu))
    assert overall["geomean_all"]["eager"] == pytest.approx((softmax * gelu) ** (1 / 5))
    assert record["unmatched"] and "not_a_task" in record["unmatched"][0]
    seed = record["seed"]["value"]
    assert record["seed"]["mode"] == "secret"

    assert record["config"]["confirm_faster"] is False  # TEST_CONFIG's; recorded so runs compare alike
    other = json.loads(json.dumps(record))
    other["name"] = "earlier"
    other["summary"]["overall"]["pass_rate"] = 0.2
    del other["config"]["confirm_faster"]  # a record from before the setting existed
    paths = write_leaderboard(record, tmp_path / "out", compare=other, compare_path="earlier.json")
    for key in ("fast_p", "speedups"):
        data = paths[key].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    text = paths["markdown"].read_text()
    assert f"Hidden seed: {seed}" in text and f"--seed {seed}" in text
    assert "| overall | 5 | 4 | 2 | 40% |" in text
    assert "## Compared with earlier" in text and "| overall | pass rate | 40% | 20% | +20 pt |" in text
    assert "timed milestone claims differently (`confirm_faster` False here, None there" in text
    assert "| builtin/L1/cumsum | MISSING |" in text
    saved = load_leaderboard(paths["json"])
    assert saved["seed"]["value"] == seed and saved["compare"]["name"] == "earlier"
    assert saved["eval_results"]["builtin/L1/sum_dim"]["error_code"] == "INCORRECT"


# ------------------------------------------------------------------------------------- CLI

def test_cli_errors_before_judging(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path / "missing"), "--tasks", "builtin/L1/gelu", "--out",
                 str(tmp_path / "o"), "--backend", "cpu"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["leaderboard", str(tmp_path), "--tasks", "builtin/L1/gelu", "--levels", "1", "--out",
                 str(tmp_path / "o"), "--backend", "cpu"]) == 2
    assert "--levels" in capsys.readouterr().err
    assert main(["leaderboard", str(tmp_path), "--tasks", "builtin/L1/nope", "--out", str(tmp_path / "o")]) == 2
    assert "no task 'builtin/L1/nope'" in capsys.readouterr().err
    (tmp_path / "L1").mkdir()
    bad = tmp_path / "other.json"
    bad.write_text("{}")
    assert main(["leaderboard", str(tmp_path), "--suite", "builtin", "--levels", "1", "--out", str(tmp_path / "o"),
                 "--compare", str(bad)]) == 2
    assert "not a cuda_gym leaderboard.json" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------ the hidden seed defeats tuning to the public one

TINY_LINEAR = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x)


def get_inputs():
    return [torch.randn(8, 4)]


def get_init_inputs():
    return []
'''

LINEAR_CANDIDATE = '''
import torch
import torch.nn as nn
from cuda_gym.native import load_kernels

_lib = load_kernels(cpp=r"""
#include <cstdint>
{constants}
extern "C" void linear4(const float* x, const float* w, const float* b, float* y, int64_t rows) {{
    for (int64_t r = 0; r < rows; ++r)
        for (int o = 0; o < 4; ++o) {{
            float s = b[o];
            for (int i = 0; i < 4; ++i) s += x[r * 4 + i] * w[o * 4 + i];
            y[r * 4 + o] = s;
        }}
}}
""", functions=["void linear4(const float* x, const float* w, const float* b, float* y, int64_t rows)"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape[0], 4, dtype=x.dtype, device=x.device)
        _lib.linear4(x, {weight}, {bias}, y, x.shape[0])
        return y
'''


def _linear_candidates() -> tuple[str, str]:
    """(honest, memorised): the honest one passes the reference weights it is given to its
    kernel; the memorised one passes, from module-level tensors, the weights that the public seed 0
    gives the reference (torch.manual_seed(0) before Model(), as the evaluator builds it)."""
    import torch

    torch.manual_seed(0)
    with torch.device("cpu"):
        linear = torch.nn.Linear(4, 4)
    honest = LINEAR_CANDIDATE.format(constants="", weight="self.linear.weight", bias="self.linear.bias")
    memorised = LINEAR_CANDIDATE.format(constants="", weight="_W0", bias="_B0").replace(
        "class ModelNew", f"_W0 = torch.tensor({linear.weight.detach().tolist()})\n"
                          f"_B0 = torch.tensor({linear.bias.detach().tolist()})\n\n\nclass ModelNew")
    return honest, memorised


def test_hidden_seed_catches_a_candidate_tuned_to_the_public_seed(tmp_path, cpu_evaluator):
    from cuda_gym.tasks.task import task_from_source

    task = task_from_source(TINY_LINEAR, task_id="test/L1/tiny_linear", level=1, name="tiny_linear")
    honest, memorised = _linear_candidates()
    public = cpu_evaluator.evaluate(task, memorised, config=cpu_evaluator.config.replace(seed=0))
    assert public.error_code.value == "OK", public.message  # it fools the public seed

    for name, source in (("honest", honest), ("memorised", memorised)):
        (tmp_path / name / "L1").mkdir(parents=True)
        (tmp_path / name / "L1" / "tiny_linear.py").write_text(source)
    verdicts = {}
    for name in ("honest", "memorised"):
        record = run_leaderboard(read_submissions(tmp_path / name, [task]), [task], cpu_evaluator, progress=False)
        assert record["seed"]["mode"] == "secret" and record["seed"]["value"] != 0
        verdicts[name] = record["results"][0]["verdict"]
    assert verdicts == {"honest": "OK", "memorised": "INCORRECT"}
