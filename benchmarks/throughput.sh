#!/usr/bin/env bash
# Verdicts per hour on one GPU, today's pipeline beside `prepare_during_jobs`, side by side in one
# call: a mixed KernelBench level 1-2 stream (identity, wrong, crashing candidates) through
# benchmarks/verdict_profile.py, runs A B A B (A: spares warm up only while the device is idle;
# B: the next worker starts on the CPU while a job holds the device), one shared cache so the
# baselines are measured once, before the first run's stream. Each run's profile JSON goes to $OUT;
# $OUT/throughput.json has per variant the verdicts, wall seconds, verdicts per hour and the
# identity candidates' speedups vs eager (their spread is the fidelity check), and at top level the
# faster variant's `verdicts_per_hour`, `device` and `verdicts` (the count), as
# benchmarks/results/throughput/<device>/<date>.json keeps them.
# Env: TASKS (distinct tasks, 12), MINUTES (stream minutes per run, 1), BASELINES (eager).
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
CACHE=$(mktemp -d /tmp/cuda_gym_throughput.XXXX)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for run in A0 B0 A1 B1; do
  flag=""; [ "${run:0:1}" = B ] && flag="--prepare-during-jobs"
  timeout "${RUN_S:-200}" python3 benchmarks/verdict_profile.py --backend cuda --suite kernelbench --levels 1,2 \
    --tasks "${TASKS:-12}" --n 2000 --max-minutes "${MINUTES:-1}" --baselines "${BASELINES:-eager}" \
    --cache-dir "$CACHE" --label "$run" $flag --out "$OUT/profile_$run.json" > "$OUT/profile_$run.log" 2>&1
  echo "$run rc=$? at $(( $(date +%s) - START )) s: $(tail -1 "$OUT/profile_$run.log")"
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {p.stem.split("_", 1)[1]: json.loads(p.read_text()) for p in sorted(out.glob("profile_*.json"))}
variants = {}
for label, run in runs.items():
    s = run.get("summary") or {}
    if not s:
        continue
    v = variants.setdefault("prepare_during_jobs" if run.get("prepare_during_jobs") else "idle_device_spares",
                            {"runs": [], "verdicts": 0, "wall_s": 0.0, "as_expected": 0, "identity": []})
    v["runs"].append({"label": label, **{k: s.get(k) for k in ("verdicts", "as_expected", "verdicts_per_hour",
                                                               "wall_s", "median_eval_s", "eval_share_of_wall",
                                                               "identity_speedup_vs_eager")}})
    v["verdicts"] += s["verdicts"]; v["wall_s"] += s["wall_s"]; v["as_expected"] += s["as_expected"]
    v["identity"] += [r["speedup_vs_eager"] for r in run["verdicts"] if r["kind"] == "identity" and r.get("speedup_vs_eager")]
for v in variants.values():
    v["verdicts_per_hour"] = round(3600 * v["verdicts"] / v["wall_s"], 1) if v["wall_s"] else None
    ids = v.pop("identity")
    v["identity_speedup_vs_eager"] = {"count": len(ids), "median": statistics.median(ids) if ids else None,
                                      "min": min(ids, default=None), "max": max(ids, default=None),
                                      "within_3_percent": sum(abs(s - 1) <= 0.03 for s in ids)}
best = max(variants.items(), key=lambda item: item[1]["verdicts_per_hour"] or 0) if variants else (None, {})
device = next((r.get("device") for r in runs.values() if r.get("device")), None)
record = {"benchmark": "throughput", "device": device, "variant": best[0],
          "verdicts_per_hour": best[1].get("verdicts_per_hour"), "verdicts": best[1].get("verdicts"),
          "all_as_expected": all(v["as_expected"] == v["verdicts"] for v in variants.values()),
          "variants": variants}
(out / "throughput.json").write_text(json.dumps(record, indent=1) + "\n")
print(json.dumps({k: v for k, v in record.items() if k != "variants"}))
for name, v in variants.items():
    print(name, v["verdicts_per_hour"], v["identity_speedup_vs_eager"])
PY
echo "call took $(( $(date +%s) - START )) s"
