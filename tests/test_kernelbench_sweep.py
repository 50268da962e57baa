"""benchmarks/kernelbench_sweep.py on the CPU over a tiny KernelBench-format folder written here: the
identity candidate comes out correct, the result file carries the fields issue 12 names, and a second
run resumes from it instead of judging the tasks again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCALE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return torch.relu(x) * self.factor


def get_inputs():
    return [torch.randn(64, 128)]


def get_init_inputs():
    return [3.0]
"""

ROW_SUM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return []
"""


def _sweep(data: Path, out: Path, *extra: str, compile_baseline: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "benchmarks" / "kernelbench_sweep.py"), "--kernelbench", str(data),
               "--levels", "1", "--backend", "cpu", *([] if compile_baseline else ["--no-compile-baseline"]),
               "--baseline-workers", "1", "--no-confirm", "--out", str(out), *extra]
    env = {**os.environ, "CUDA_GYM_CACHE": str(data / "cache")}  # not the user's cache
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.slow
def test_the_sweep_judges_the_identity_and_resumes(tmp_path):
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "1_Scaled_ReLU.py").write_text(SCALE)
    (level1 / "2_Row_Sum.py").write_text(ROW_SUM)
    out = tmp_path / "sweep.json"
    first = _sweep(tmp_path, out)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = json.loads(out.read_text())["tasks"]
    assert sorted(r["task_id"] for r in rows) == ["kernelbench/L1/1_Scaled_ReLU", "kernelbench/L1/2_Row_Sum"]
    for row in rows:
        assert {"task_id", "error_code", "speedup_vs_eager", "speedup_vs_compile", "peak_device_gib",
                "seconds"} <= set(row)
        assert row["error_code"] == "OK", row["message"]
        assert row["speedup_vs_eager"] > 0 and row["seconds"] > 0
        assert row["speedup_vs_compile"] is None  # --no-compile-baseline
        # Where the time went: the eval worker's stages, in order of their end.
        stages = row["eval_stage_seconds"]
        assert {"reference", "timing", "checks"} <= set(stages) and stages["reference"] <= stages["checks"]
        assert row["baseline_peak_gib"] is None and row["baseline_worker_memory"] == []  # CUDA only
    summary = json.loads(out.read_text())["summary"]["1"]
    assert summary["tried"] == 2 and summary["ok"] == 2 and summary["geomean_speedup_vs_compile"] is None
    assert "level" in first.stdout and "wrote" in first.stdout
    # Resumed: the rows already there are kept and their tasks not judged again.
    second = _sweep(tmp_path, out)
    assert second.returncode == 0, second.stderr[-2000:]
    again = json.loads(out.read_text())["tasks"]
    assert [(r["task_id"], r["seconds"]) for r in again] == [(r["task_id"], r["seconds"]) for r in rows]
    # Each row names the device that judged it, so a sweep resumed on another card keeps its rows apart;
    # rows of a file written before rows carried it take the file's device.
    device = json.loads(out.read_text())["device"]
    assert device.startswith("cpu") and {r["device"] for r in again} == {device}
    assert json.loads(out.read_text())["summary"]["1"]["devices"] == {device: 2}
    older = json.loads(out.read_text())
    older["device"] = "an older card"
    for row in older["tasks"]:
        del row["device"]
    (tmp_path / "older.json").write_text(json.dumps(older))
    assert _sweep(tmp_path, tmp_path / "older.json").returncode == 0
    resumed = json.loads((tmp_path / "older.json").read_text())
    assert {r["device"] for r in resumed["tasks"]} == {"an older card"} and resumed["device"] == device
    # Moved onto this run's card: the other card's rows of the tasks asked for are judged again, and
    # kept under "superseded" with why.
    # Only onto the card named: on another, nothing moves.
    kept = _sweep(tmp_path, tmp_path / "older.json", "--tasks", "kernelbench/L1/2_Row_Sum", "--rejudge-onto", "H200")
    assert kept.returncode == 0 and "nothing is judged" in kept.stdout, kept.stderr[-2000:]
    assert json.loads((tmp_path / "older.json").read_text())["tasks"] == resumed["tasks"]
    moved = _sweep(tmp_path, tmp_path / "older.json", "--tasks", "kernelbench/L1/2_Row_Sum", "--rejudge-onto", "CPU")
    assert moved.returncode == 0, moved.stderr[-2000:]
    assert "1 rows from other cards to judge again" in moved.stdout
    onto = json.loads((tmp_path / "older.json").read_text())
    assert {r["task_id"]: r["device"] for r in onto["tasks"]} == {"kernelbench/L1/1_Scaled_ReLU": "an older card",
                                                                 "kernelbench/L1/2_Row_Sum": device}
    assert [(r["task_id"], r["device"], r["why"]) for r in onto["superseded"]] == [
        ("kernelbench/L1/2_Row_Sum", "an older card", f"judged again on {device}")]
    assert onto["summary"]["1"]["devices"] == {"an older card": 1, device: 1}
    # One file, one timing setting: resuming it with other timed reps is refused before anything is
    # judged; the setting it was measured with is recorded.
    recorded = json.loads(out.read_text())
    assert (recorded["timing_reps"], recorded["timing_budget_s"]) == (50, 1.0)
    refused = _sweep(tmp_path, out, "--timing-reps", "20", "--timing-budget-s", "0.4")
    assert refused.returncode == 2 and "measured with timing_reps=50" in refused.stderr, refused.stderr[-2000:]
    assert json.loads(out.read_text())["tasks"] == again
    # --max-minutes starts no task that the longest of its level so far (resumed rows included)
    # would carry past the limit.
    payload = json.loads(out.read_text())
    payload["tasks"] = [dict(payload["tasks"][0], seconds=3600.0)]
    limited = tmp_path / "limited.json"
    limited.write_text(json.dumps(payload))
    third = _sweep(tmp_path, limited, "--max-minutes", "30")
    assert third.returncode == 0, third.stderr[-2000:]
    assert len(json.loads(limited.read_text())["tasks"]) == 1 and "stopped at the 30.0 min limit" in third.stdout


def test_the_sweep_prewarms_the_compile_baselines_of_the_next_tasks(tmp_path):
    level1 = tmp_path / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    # Graphs no earlier run compiled (a constant drawn from the tmp path), so a cache hit is the prewarm's.
    shift = (hash(str(tmp_path)) % 997) / 1000
    (level1 / "1_Scaled_ReLU.py").write_text(SCALE.replace("* self.factor", f"* self.factor - {shift}"))
    (level1 / "2_Row_Sum.py").write_text(ROW_SUM.replace("x.sum(dim=1)", f"x.sum(dim=1) * {1 + shift}"))
    out = tmp_path / "sweep.json"
    run = _sweep(tmp_path, out, "--prewarm", "2", "--prewarm-chunk", "2", compile_baseline=True)
    assert run.returncode == 0, run.stderr[-2000:]
    payload = json.loads(out.read_text())
    assert [(chunk["tasks"], chunk["failed"]) for chunk in payload["prewarm"]] == [(2, {})]
    for row in payload["tasks"]:
        assert row["error_code"] == "OK", row["message"]
        assert row["speedup_vs_compile"] > 0
        assert row["baseline_compile_cache"][0].get("fxgraph_cache_hit", 0) >= 1, row["baseline_compile_cache"]
    assert "torch.compile prewarm:" in run.stdout
