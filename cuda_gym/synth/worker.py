"""A synthesis worker process: `python -m cuda_gym.synth.worker '<json settings>'`.

It reads one JSON job per line on stdin and answers one JSON line per job on its protocol channel
(the original stdout; the task code's own prints go to stderr, which the parent sends to a log).
It first answers {"ready": ...} with its device. Jobs are {"kind": "check" | "compile", ...}, see
`check.py`. A job whose result asks for a restart (a CUDA error can leave the context unusable)
ends the process after the answer; the parent starts a fresh one.
"""
from __future__ import annotations

import json
import os
import sys


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1]) if len(argv) > 1 else {}
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever a task prints must not reach the protocol channel
    sys.stdout = sys.stderr
    import torch

    threads = settings.get("threads")
    if threads:
        torch.set_num_threads(int(threads))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    backend = settings.get("backend", "cpu")
    if backend == "cuda":
        if not torch.cuda.is_available():
            protocol.write(json.dumps({"ready": False, "message": "torch sees no CUDA device in the worker"}) + "\n")
            return 2
        torch.cuda.init()
        device = torch.cuda.get_device_name(0)
    else:
        device = f"cpu ({torch.get_num_threads()} threads)"
    from .check import check_task, compile_task

    protocol.write(json.dumps({"ready": True, "device": device, "torch": torch.__version__}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        runner = compile_task if job.get("kind") == "compile" else check_task
        result = runner(job)
        protocol.write(json.dumps(result) + "\n")
        if result.get("restart"):
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
