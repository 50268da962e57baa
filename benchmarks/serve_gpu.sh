#!/usr/bin/env bash
# `cuda-gym serve` on a GPU machine against a local Evaluator, side by side on the same machine: the
# built-in tasks' CUDA reference solutions are judged one at a time: a warm-up round (builds and
# baselines into one shared cache; not counted), then rounds local, serve, serve, local (ABBA), so
# both sides time the same cached work. A serve round starts `cuda-gym serve --backend cuda` with a token on
# loopback and judges through RemoteEvaluator from this machine; the service is stopped before the
# next round, so the two never share the GPU. Reported per round: every verdict (all must be OK) and
# its client wall seconds; overall: the median per-task overhead (serve wall - local wall) and the
# same for the judge's own eval_seconds, which the service must not change, and the overhead outside
# the evaluation (wall - eval_seconds, serve minus local), free of the evaluation's own noise.
# Needs: pip install -e '.[serve]' and a GPU. Writes $OUT/serve_gpu.json and the service's logs.
# BACKEND=cpu LIMIT=2 runs the same on the CPU over 2 tasks (a check of the script, not a measurement).
set -u
OUT=${OUT:-$PWD/serve_gpu_out}
source benchmarks/h200_env.sh  # the carried wheels (gymnasium, fastapi, uvicorn) where they are missing
export CUDA_GYM_CACHE=${CUDA_GYM_CACHE:-$OUT/cache}
[ "${BACKEND:-cuda}" = cuda ] && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout "${RUN_S:-3000}" python3 - "$OUT" "${BACKEND:-cuda}" "${LIMIT:-0}" <<'PY'
import json, secrets, statistics, subprocess, sys, time
from pathlib import Path
from cuda_gym.eval import Evaluator
from cuda_gym.eval.remote import JudgeUnavailable, RemoteEvaluator
from cuda_gym.tasks import load_suite, solution_path

out, backend, limit = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
tasks = [t for t in load_suite("builtin") if solution_path(t, backend)][:limit or None]
token = secrets.token_urlsafe(32)
(out / "token").write_text(token)

def judge_all(evaluator):
    rows = {}
    for task in tasks:
        started = time.perf_counter()
        result = evaluator.evaluate(task, solution_path(task, backend).read_text())
        rows[task.id] = {"wall_s": time.perf_counter() - started, "eval_s": result.eval_seconds,
                         "verdict": result.error_code.value, "speedup_vs_eager": result.speedup_vs_eager}
    return rows

def serve_round(n):
    port = 8765 + n
    log = open(out / f"serve_{n}.log", "w")
    service = subprocess.Popen([sys.executable, "-m", "cuda_gym.cli", "serve", "--backend", backend, "--port", str(port), "--token-file",
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
# The warm-up round builds every solution and measures every baseline into the shared cache; it
# is left out of the comparison, so that every counted round times the same (cached) work.
for n, kind in enumerate(["warmup", "local", "serve", "serve", "local"]):
    started = time.time()
    if kind in ("warmup", "local"):
        with Evaluator(backend) as evaluator:
            rows = judge_all(evaluator)
    else:
        rows = serve_round(n)
    rounds.append({"kind": kind, "rows": rows})
    print(f"round {n} {kind}: {time.time() - started:.0f} s, verdicts "
          f"{sorted(set(r['verdict'] for r in rows.values()))}", flush=True)

def per_task(kind, key):
    return {t.id: statistics.median(r["rows"][t.id][key] for r in rounds if r["kind"] == kind) for t in tasks}

summary = {"backend": backend, "tasks": len(tasks), "all_ok": all(row["verdict"] == "OK" for r in rounds for row in r["rows"].values())}
for key in ("wall_s", "eval_s"):
    local, serve = per_task("local", key), per_task("serve", key)
    summary[f"median_local_{key}"] = statistics.median(local.values())
    summary[f"median_serve_{key}"] = statistics.median(serve.values())
    summary[f"median_overhead_{key}"] = statistics.median(serve[t] - local[t] for t in local)
# The time a verdict spends outside the judge's own evaluation (queueing, building, baselines read,
# and for serve the HTTP and journal): its difference is the service's overhead without eval noise.
outside = {kind: {t: per_task(kind, "wall_s")[t] - per_task(kind, "eval_s")[t] for t in per_task(kind, "wall_s")}
           for kind in ("local", "serve")}
summary["median_overhead_outside_eval_s"] = statistics.median(outside["serve"][t] - outside["local"][t]
                                                              for t in outside["local"])
(out / "serve_gpu.json").write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=1))
print(json.dumps(summary, indent=1))
PY
echo "rc=$?"
