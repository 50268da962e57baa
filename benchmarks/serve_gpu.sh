#!/usr/bin/env bash
# `cuda-gym serve` on a GPU machine against a local Evaluator, side by side on the same machine: the
# built-in tasks' CUDA reference solutions are judged one at a time, in rounds local, serve, serve,
# local (ABBA, one shared cache, so builds and baselines are cached after the first round and both
# sides time the same work). A serve round starts `cuda-gym serve --backend cuda` with a token on
# loopback and judges through RemoteEvaluator from this machine; the service is stopped before the
# next round, so the two never share the GPU. Reported per round: every verdict (all must be OK) and
# its client wall seconds; overall: the median per-task overhead (serve wall - local wall) and the
# same for the judge's own eval_seconds, which the service must not change.
# Needs: pip install -e '.[serve]' and a GPU. Writes $OUT/serve_gpu.json and the service's logs.
set -u
OUT=${OUT:-$PWD/serve_gpu_out}
mkdir -p "$OUT"
export CUDA_GYM_CACHE=${CUDA_GYM_CACHE:-$OUT/cache}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${RUN_S:-3000}" python3 - "$OUT" <<'PY'
import json, secrets, statistics, subprocess, sys, time
from pathlib import Path
from cuda_gym.eval import Evaluator
from cuda_gym.eval.remote import JudgeUnavailable, RemoteEvaluator
from cuda_gym.tasks import load_suite, solution_path

out = Path(sys.argv[1])
tasks = [t for t in load_suite("builtin") if solution_path(t, "cuda")]
token = secrets.token_urlsafe(32)
(out / "token").write_text(token)

def judge_all(evaluator):
    rows = {}
    for task in tasks:
        started = time.perf_counter()
        result = evaluator.evaluate(task, solution_path(task, "cuda").read_text())
        rows[task.id] = {"wall_s": time.perf_counter() - started, "eval_s": result.eval_seconds,
                         "verdict": result.error_code.value, "speedup_vs_eager": result.speedup_vs_eager}
    return rows

def serve_round(n):
    port = 8765 + n
    log = open(out / f"serve_{n}.log", "w")
    service = subprocess.Popen(["cuda-gym", "serve", "--backend", "cuda", "--port", str(port), "--token-file",
                                str(out / "token"), "--journal", str(out / f"journal_{n}")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                remote = RemoteEvaluator(f"http://127.0.0.1:{port}", token)
                break
            except JudgeUnavailable:
                if time.monotonic() > deadline or service.poll() is not None:
                    raise SystemExit(f"cuda-gym serve did not start: see {out}/serve_{n}.log")
                time.sleep(1)
        with remote:
            return judge_all(remote)
    finally:
        service.terminate()
        service.wait(timeout=60)

rounds = []
for n, kind in enumerate(["local", "serve", "serve", "local"]):
    started = time.time()
    if kind == "local":
        with Evaluator("cuda") as evaluator:
            rows = judge_all(evaluator)
    else:
        rows = serve_round(n)
    rounds.append({"kind": kind, "rows": rows})
    print(f"round {n} {kind}: {time.time() - started:.0f} s, verdicts "
          f"{sorted(set(r['verdict'] for r in rows.values()))}", flush=True)

def per_task(kind, key):
    return {t.id: statistics.median(r["rows"][t.id][key] for r in rounds if r["kind"] == kind) for t in tasks}

summary = {"tasks": len(tasks), "all_ok": all(row["verdict"] == "OK" for r in rounds for row in r["rows"].values())}
for key in ("wall_s", "eval_s"):
    local, serve = per_task("local", key), per_task("serve", key)
    summary[f"median_local_{key}"] = statistics.median(local.values())
    summary[f"median_serve_{key}"] = statistics.median(serve.values())
    summary[f"median_overhead_{key}"] = statistics.median(serve[t] - local[t] for t in local)
(out / "serve_gpu.json").write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=1))
print(json.dumps(summary, indent=1))
PY
echo "rc=$?"
