"""How long `cuda-gym eval` takes to answer a candidate that is not valid Python (INVALID_ACTION).

    python benchmarks/invalid_action_latency.py --out benchmarks/results/invalid_action_latency/cpu-2core/<date>.json

Writes a candidate with a syntax error to a temporary folder and times the whole command, process
start to exit, `--runs` times (after one untimed run that warms the file cache); reports each run
and the median. The answer should need no worker process and no torch import: only the CLI and the
candidate's parse. `--command` replaces `cuda-gym` (e.g. `python -m cuda_gym.cli` for a checkout
that is not installed).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

TASK = "builtin/L1/softmax"
BROKEN = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module:\n    pass\n"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--command", default="cuda-gym", help="the cuda-gym command line (default: cuda-gym)")
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--conditions", default="", help="what else the machine was doing, for the record")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder) / "broken.py"
        candidate.write_text(BROKEN)
        command = [*shlex.split(args.command), "eval", TASK, str(candidate)]
        seconds, outputs = [], []
        for run in range(args.runs + 1):
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True)
            elapsed = time.perf_counter() - started
            if "INVALID_ACTION" not in done.stdout:
                print(f"error: expected INVALID_ACTION, got rc {done.returncode}:\n{done.stdout}{done.stderr}",
                      file=sys.stderr)
                return 1
            if run:  # the first run only warms the file cache
                seconds.append(elapsed)
                outputs.append(done.stdout.strip())
    payload = {
        "benchmark": "invalid_action_latency",
        "date": dt.date.today().isoformat(),
        "command": shlex.join(command[:-1] + ["broken.py"]),
        "hardware": {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine(), "gpu": None},
        "versions": {"python": platform.python_version(), "torch": version("torch")},
        "note": "wall time of the whole process, start to exit, one run after another; one untimed run first",
        "conditions": args.conditions,
        "runs_s": [round(s, 4) for s in seconds],
        "median_s": round(statistics.median(seconds), 4),
        "output": outputs[-1],
    }
    print(json.dumps(payload, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
