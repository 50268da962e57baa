#!/usr/bin/env bash
# The judge's evaluation seconds per verdict, side by side with another version of it on one machine
# in one call: benchmarks/kernelbench_sweep.py (identity candidate, eager baseline in one worker,
# no confirmation) over TASKS, from OLD_DIR (a checkout of the other version: `git archive REV
# cuda_gym benchmarks csrc | tar -x -C DIR`) and from this checkout, in the order old, new, new,
# old, each with a fresh cache. Writes overhead.json under $OUT (per task: each run's verdict,
# eval_seconds, stages and identity speedup; the median eval_seconds of each version; the median of
# the new/old ratios); the runs' own files and logs stay in $RUNS (a device call brings back few
# files). From the repo root, with KernelBench at .kb/KernelBench and wheels in .whl/.
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
OLD_DIR=${OLD_DIR:-$PWD/.old}
RUNS=${RUNS:-/tmp/cg_overhead_runs}
mkdir -p "$RUNS"
NEW_DIR=$PWD
SITE=${PYTHONPATH#$PWD:}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu_overhead.txt"
for run in old_1 new_1 new_2 old_2; do
  dir=$NEW_DIR; [ "${run%_*}" = old ] && dir=$OLD_DIR
  rm -rf "/tmp/cg_$run"
  (cd "$dir" && CUDA_GYM_CACHE=/tmp/cg_$run PYTHONPATH=$dir:$SITE timeout "${RUN_S:-150}" python3 benchmarks/kernelbench_sweep.py \
    --tasks "$TASKS" --no-compile-baseline --baseline-workers 1 --no-confirm --out "$RUNS/$run.json" > "$RUNS/$run.log" 2>&1)
  echo "$run rc=$? at $(( $(date +%s) - START )) s"
  grep -v "it/s\]\|s/it\]" "$RUNS/$run.log" | tail -4
done
python3 - "$RUNS" "$OUT" <<'PY'
import json, statistics, sys
from pathlib import Path
runs_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
runs = {name: {r["task_id"]: r for r in json.loads((runs_dir / f"{name}.json").read_text())["tasks"]}
        for name in ("old_1", "new_1", "new_2", "old_2") if (runs_dir / f"{name}.json").exists()}
tasks = sorted(set.intersection(*(set(rows) for rows in runs.values()))) if runs else []
rows = []
for task in tasks:
    old = [runs[n][task]["eval_seconds"] for n in runs if n.startswith("old")]
    new = [runs[n][task]["eval_seconds"] for n in runs if n.startswith("new")]
    rows.append({"task_id": task, "old_eval_s": old, "new_eval_s": new,
                 "ratio": statistics.median(new) / statistics.median(old),
                 "verdicts": {n: runs[n][task]["error_code"] for n in runs},
                 "speedup_vs_eager": {n: runs[n][task].get("speedup_vs_eager") for n in runs},
                 "stages": {n: runs[n][task].get("eval_stage_seconds") for n in runs}})
summary = {"tasks": len(rows), "median_ratio_new_over_old": statistics.median(r["ratio"] for r in rows) if rows else None,
           "median_old_eval_s": statistics.median(x for r in rows for x in r["old_eval_s"]) if rows else None,
           "median_new_eval_s": statistics.median(x for r in rows for x in r["new_eval_s"]) if rows else None}
devices = sorted({str(r.get("device")) for rows_of in runs.values() for r in rows_of.values()})
(out / "overhead.json").write_text(json.dumps({"summary": summary, "devices": devices, "runs": sorted(runs),
                                               "rows": rows}, indent=1))
print(json.dumps(summary, indent=1))
PY
echo "call took $(( $(date +%s) - START )) s"
