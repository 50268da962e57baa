"""The judge service's own overhead: `cuda-gym serve`'s HTTP layer, job book and journal under load,
with a fake judge that answers at once, so that nothing but the service is measured.

The service runs in its own process (uvicorn on loopback, a fresh journal, one bearer token); the
clients are threads of this process, each on one keep-alive connection, each doing in turn: submit a
job (POST /v1/jobs, journaled with fsync), then fetch its verdict (GET /v1/jobs/{id}?wait_s=10, a
long-poll that returns when the verdict is journaled). Reported: requests per second over the whole
run, verdicts per second, and p50/p90/p99/max latency of submit and of result, in milliseconds.

    python benchmarks/serve_load.py --clients 4 --jobs-per-client 500 --out benchmarks/results/serve_load/cpu-2core

The fake verdict is a full EvalResult (5 trials, timings, a 2,000-character log) so that the
journal and the responses carry a realistic size.
"""
from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

TOKEN = "load-test-token-0123456789abcdef"
TASK_ID = "builtin/L1/gelu"


def fake_verdict(task_id: str):
    from cuda_gym.eval import ErrorCode, EvalResult, TimingStats, TrialResult

    timing = TimingStats(median_ms=0.5, min_ms=0.4, max_ms=0.9, iqr_ms=0.05, reps=50, method="wall")
    return EvalResult(task_id=task_id, backend="cpu", error_code=ErrorCode.OK, message="correct", device="fake",
                      compiled=True, correct=True, trials=[TrialResult("normal", True, 1e-7, 1e-7, 1e-7)] * 5,
                      candidate_time=timing, eager_time=timing, speedup_vs_eager=1.0, runtime_log="x" * 2000)


class InstantJudge:
    """The Evaluator interface answering every job at once with `fake_verdict`."""

    backend, device_name, torch_version = "cpu", "fake", "0"

    def __init__(self) -> None:
        from cuda_gym.eval import EvalConfig

        self.config = EvalConfig()

    def submit(self, task, candidate, *, backend=None, config=None) -> Future:
        future: Future = Future()
        future.set_result(fake_verdict(task.id))
        return future


def serve(port_file: str, journal: str) -> None:
    """The service process: a fake judge behind the real service, until killed."""
    from cuda_gym.serve.server import Service
    from cuda_gym.tasks import load_suite

    service = Service(InstantJudge(), load_suite("builtin"), journal, port=0, tokens=[TOKEN])
    Path(port_file).write_text(str(service.port))
    service.serve_forever()


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50_ms": statistics.median(ordered), "p90_ms": at(0.90), "p99_ms": at(0.99), "max_ms": ordered[-1],
            "mean_ms": statistics.fmean(ordered), "count": len(ordered)}


def client(port: int, jobs: int, candidate: str, submit_ms: list, result_ms: list, errors: list) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    body = json.dumps({"task_id": TASK_ID, "candidate": candidate}).encode()
    for _ in range(jobs):
        started = time.perf_counter()
        connection.request("POST", "/v1/jobs", body=body, headers=headers)
        response = connection.getresponse()
        answer = json.loads(response.read())
        submitted = time.perf_counter()
        if response.status != 200:
            errors.append(answer)
            continue
        connection.request("GET", f"/v1/jobs/{answer['job_id']}?wait_s=10", headers=headers)
        response = connection.getresponse()
        verdict = json.loads(response.read())
        finished = time.perf_counter()
        if verdict.get("status") != "done" or verdict["result"]["error_code"] != "OK":
            errors.append(verdict)
        submit_ms.append((submitted - started) * 1000)
        result_ms.append((finished - submitted) * 1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--jobs-per-client", type=int, default=500, help="submit+result rounds per client")
    parser.add_argument("--out", default=None, help="folder for <date>.json (default: print only)")
    parser.add_argument("--serve", nargs=2, metavar=("PORT_FILE", "JOURNAL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return 0
    from cuda_gym.tasks import get_task

    candidate = get_task(TASK_ID).source.replace("class Model(", "class ModelNew(")  # a realistic size
    with tempfile.TemporaryDirectory() as scratch:
        port_file = Path(scratch) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port_file), str(Path(scratch) / "journal")])
        try:
            deadline = time.monotonic() + 60
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the service did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
            while True:  # bound, but listening only once uvicorn has started
                try:
                    http.client.HTTPConnection("127.0.0.1", port, timeout=5).connect()
                    break
                except ConnectionRefusedError:
                    if time.monotonic() > deadline:
                        raise SystemExit("the service did not start") from None
                    time.sleep(0.05)
            client(port, 20, candidate, [], [], [])  # warm-up: imports, first connection
            submit_ms: list[float] = []
            result_ms: list[float] = []
            errors: list = []
            threads = [threading.Thread(target=client, args=(port, args.jobs_per_client, candidate, submit_ms,
                                                             result_ms, errors)) for _ in range(args.clients)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall_s = time.perf_counter() - started
            journal_bytes = (Path(scratch) / "journal" / "journal.jsonl").stat().st_size
        finally:
            server.terminate()
            server.wait(timeout=30)
    verdicts = len(result_ms)
    report = {
        "benchmark": "serve_load",
        "date": dt.date.today().isoformat(),
        "what": "cuda-gym serve with a fake judge that answers at once: the service's own overhead (HTTP, "
                "auth, job book, fsynced journal). Service in its own process, clients as threads of another, "
                "loopback, one keep-alive connection per client; each round = submit, then long-poll its result.",
        "command": f"python benchmarks/serve_load.py --clients {args.clients} --jobs-per-client {args.jobs_per_client}",
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "system": platform.system(), "load_average_1_5_15_at_end": list(os.getloadavg())},
        "note": "a shared 2-core machine: other processes ran beside this one (the load average)",
        "clients": args.clients,
        "jobs_per_client": args.jobs_per_client,
        "candidate_chars": len(candidate),
        "errors": len(errors),
        "first_errors": errors[:3],
        "wall_s": wall_s,
        "requests": 2 * verdicts,
        "requests_per_s": 2 * verdicts / wall_s,
        "verdicts_per_s": verdicts / wall_s,
        "submit": percentiles(submit_ms),
        "result": percentiles(result_ms),
        "journal_bytes_per_job": journal_bytes / max(1, verdicts + 20),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        out = Path(args.out) / f"{report['date']}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        print(f"wrote {out}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
