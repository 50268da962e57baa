"""benchmarks/gpu_soak.py on the CPU (the smoke CI runs of the GPU soak): a small seeded mix over a
one-task KernelBench-format folder written here, the built-in solutions and the CPU hostile catalogue.
Every candidate gets its expected verdict, no process is left behind, and a resumed run judges only
the verdicts its file lacks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LINEAR_RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64]
"""


def _soak(tmp_path: Path, cache_dir: str, out: Path, *extra: str) -> tuple[dict, str]:
    env = {**os.environ, "CUDA_GYM_KERNELBENCH": str(tmp_path / "kb"), "CUDA_GYM_CACHE": cache_dir}
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_soak.py"), "--backend", "cpu", "--n", "8",
                          "--seed", "0", "--out", str(out), *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    files = list(out.glob("gpu_soak_cpu_*.json"))
    assert len(files) == 1, run.stdout[-2000:]
    return json.loads(files[0].read_text()), run.stdout


@pytest.mark.slow
def test_the_soak_gives_every_candidate_its_verdict_and_resumes(tmp_path, cache_dir):
    (tmp_path / "kb" / "level2").mkdir(parents=True)
    (tmp_path / "kb" / "level2" / "1_Linear_ReLU.py").write_text(LINEAR_RELU)
    first, printed = _soak(tmp_path, cache_dir, tmp_path / "first")
    assert "plan of 8, 8 to judge" in printed
    assert first["complete"] and first["judged"] == 8 and first["wrong_verdicts"] == 0, first["wrong"]
    assert first["processes_left"] == []
    verdicts = first["verdicts"]
    assert sorted(verdicts, key=int) == [str(i) for i in range(8)]
    assert all(v["got"] == v["expected"] and v["device"] == first["device"] for v in verdicts.values())
    assert all(len(v["digest"]) == 16 for v in verdicts.values()) and first["superseded"] == {}
    # Seed 0's plan mixes the kinds: the identity and the scaled output, a built-in solution, a hostile
    # file, and the failures before judging.
    assert {"kernelbench_identity", "kernelbench_wrong", "compile_error", "invalid_action", "builtin_solution"} <= {
        v["kind"] for v in verdicts.values()}
    assert any(v["kind"].startswith("hostile:") for v in verdicts.values())

    # A run cut short keeps what it judged: three verdicts taken out of the file are judged again,
    # the other five kept as they were.
    partial = dict(first, verdicts={k: v for k, v in verdicts.items() if k not in {"1", "3", "6"}})
    # (one verdict from before verdicts named their device: it takes the file's)
    partial["device"] = "an older card"
    del partial["verdicts"]["0"]["device"]
    # A verdict stands only for the candidate it judged: one given for another source (2) or from
    # before verdicts named their candidate (4) is kept aside and judged again.
    partial["verdicts"]["2"] = dict(partial["verdicts"]["2"], digest="0" * 16, got="FORBIDDEN")
    del partial["verdicts"]["4"]["digest"]
    partial["verdicts"]["99"] = dict(partial["verdicts"]["5"])  # an index outside this plan of 8
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    resumed, printed = _soak(tmp_path, cache_dir, tmp_path / "second", "--resume", str(tmp_path / "partial.json"))
    assert "3 earlier verdicts superseded" in printed and "plan of 8, 5 to judge" in printed
    assert resumed["complete"] and resumed["judged"] == 8 and resumed["wrong_verdicts"] == 0, resumed["wrong"]
    assert resumed["judged_this_run"] == 5 and first["judged_this_run"] == 8
    assert resumed["verdicts"]["0"]["device"] == "an older card"
    partial["verdicts"]["0"]["device"] = "an older card"
    kept = {k: v for k, v in partial["verdicts"].items() if k not in {"2", "4", "99"}}
    assert set(resumed["verdicts"]) == {str(i) for i in range(8)}
    assert {k: resumed["verdicts"][k] for k in kept} == kept
    assert {k: resumed["verdicts"][k]["kind"] for k in ("1", "2", "3", "4", "6")} == {
        k: verdicts[k]["kind"] for k in ("1", "2", "3", "4", "6")}
    assert resumed["verdicts"]["2"]["digest"] == verdicts["2"]["digest"]
    assert [(row["got"], row["why"]) for row in resumed["superseded"]["2"]] == [("FORBIDDEN", "the candidate changed since")]
    assert [row["why"] for row in resumed["superseded"]["4"]] == ["judged before verdicts named their candidate"]
    assert [row["why"] for row in resumed["superseded"]["99"]] == ["outside this plan of --n"]
    assert resumed["processes_left"] == []


@pytest.mark.slow
def test_a_soak_stopped_by_sigterm_writes_what_it_judged(tmp_path, cache_dir):
    """A `timeout` around the soak (SIGTERM) loses no verdict: it stops submitting, writes the file,
    lets the running evaluations finish into it, and leaves no process behind."""
    (tmp_path / "kb" / "level2").mkdir(parents=True)
    (tmp_path / "kb" / "level2" / "1_Linear_ReLU.py").write_text(LINEAR_RELU)
    env = {**os.environ, "CUDA_GYM_KERNELBENCH": str(tmp_path / "kb"), "CUDA_GYM_CACHE": cache_dir}
    soak = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "gpu_soak.py"), "--backend", "cpu",
                             "--n", "8", "--seed", "0", "--in-flight", "2", "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    printed = []
    for line in soak.stdout:  # the plan is made and the first evaluations are submitted
        printed.append(line)
        if "to judge" in line:
            break
    soak.send_signal(signal.SIGTERM)
    printed += soak.stdout.readlines()
    assert soak.wait(timeout=600) == 0, "".join(printed)[-3000:]
    (file,) = tmp_path.glob("gpu_soak_cpu_*.json")
    payload = json.loads(file.read_text())
    assert payload["interrupted"] == "SIGTERM" and not payload["complete"], "".join(printed)[-2000:]
    assert payload["judged"] == len(payload["verdicts"]) == payload["judged_this_run"] < 8
    assert all(v["got"] == v["expected"] for v in payload["verdicts"].values()), payload["wrong"]
    assert payload["processes_left"] == []
