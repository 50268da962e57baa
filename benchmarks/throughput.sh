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
# Env: TASKS (distinct tasks, 12), MINUTES (stream minutes per run, 1), BASELINES (eager), RUNS (the
# order, "A0 B0 A1 B1"; a run named C* times with TIMING_REPS / TIMING_BUDGET_S instead of the
# defaults, and measures its own baselines under them; a run named S* starts EVAL_SPARES (6) warm
# eval workers together instead of worker_setup.SPARE_WORKERS' 3).
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
CACHE=$(mktemp -d /tmp/cuda_gym_throughput.XXXX)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for run in ${RUNS:-A0 B0 A1 B1}; do
  flag=""; [ "${run:0:1}" = B ] && flag="--prepare-during-jobs"
  [ "${run:0:1}" = C ] && flag="--timing-reps ${TIMING_REPS:-20} --timing-budget-s ${TIMING_BUDGET_S:-0.4}"
  [ "${run:0:1}" = S ] && flag="--eval-spares ${EVAL_SPARES:-6}"
  timeout "${RUN_S:-200}" python3 benchmarks/verdict_profile.py --backend cuda --suite kernelbench --levels 1,2 \
    --tasks "${TASKS:-12}" --n 2000 --max-minutes "${MINUTES:-1}" --baselines "${BASELINES:-eager}" \
    --cache-dir "$CACHE" --label "$run" $flag --out "$OUT/profile_$run.json" >> "$OUT/profiles.log" 2>&1
  echo "$run rc=$? at $(( $(date +%s) - START )) s: $(tail -1 "$OUT/profiles.log")"
done
python3 benchmarks/throughput_summary.py "$OUT"/profile_*.json --out "$OUT/throughput.json"
echo "call took $(( $(date +%s) - START )) s"
