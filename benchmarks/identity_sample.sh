#!/usr/bin/env bash
# The identity candidate on a seeded sample of KernelBench level 1-2 tasks under two timing
# settings side by side in one call: the defaults (A) and EvalConfig(timing_reps=$TIMING_REPS,
# timing_budget_s=$TIMING_BUDGET_S) (C), eager baseline only, chunk by chunk (A then C on the same
# CHUNK tasks) so both meet the machine in the same state. Each setting measures its own baselines
# and writes its own kernelbench_sweep JSON ($OUT/identity_A.json, $OUT/identity_C.json, resumed
# when present); the last lines print, per setting, how many identities came within 3% of 1.00x.
# Env: TASKS (sample size, 40), SEED (0), CHUNK (10), TIMING_REPS (20), TIMING_BUDGET_S (0.4),
# SWEEP_ARGS (more kernelbench_sweep.py options, e.g. --backend cpu to try the script without a GPU).
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
SAMPLE=$(python3 -c "
import random
from cuda_gym.tasks.kernelbench import load_kernelbench
ids = sorted(t.id for t in load_kernelbench() if t.level in (1, 2))
print(' '.join(random.Random(${SEED:-0}).sample(ids, ${TASKS:-40})))")
set -- $SAMPLE
while [ $# -gt 0 ]; do
  chunk=$(echo "${@:1:${CHUNK:-10}}" | tr ' ' ','); shift $(( $# < ${CHUNK:-10} ? $# : ${CHUNK:-10} ))
  python3 benchmarks/kernelbench_sweep.py --tasks "$chunk" --no-compile-baseline ${SWEEP_ARGS:-} --out "$OUT/identity_A.json" >> "$OUT/identity.log" 2>&1
  python3 benchmarks/kernelbench_sweep.py --tasks "$chunk" --no-compile-baseline ${SWEEP_ARGS:-} --timing-reps "${TIMING_REPS:-20}" \
    --timing-budget-s "${TIMING_BUDGET_S:-0.4}" --out "$OUT/identity_C.json" >> "$OUT/identity.log" 2>&1
  echo "chunk done at $(( $(date +%s) - START )) s, $# tasks left"
done
for setting in A C; do
  python3 -c "
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))['tasks'] if r.get('speedup_vs_eager')]
within = sum(abs(r['speedup_vs_eager'] - 1) <= 0.03 for r in rows)
print(sys.argv[2], f'{within} of {len(rows)} within 3%,', 'range', min(r['speedup_vs_eager'] for r in rows), max(r['speedup_vs_eager'] for r in rows))
" "$OUT/identity_$setting.json" "$setting"
done
echo "call took $(( $(date +%s) - START )) s"
