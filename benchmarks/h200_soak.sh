#!/usr/bin/env bash
# One device call of the GPU soak (issue 12), resumable across calls and sessions:
# benchmarks/gpu_soak.py over KernelBench level 2, the built-in solutions and the hostile catalogue,
# resumed from $PREV_SOAK (a gpu_soak_cuda_*.json), submitting for SOAK_MINUTES (default 8.5), a hard
# stop (SIGTERM: the verdicts so far are written) after SOAK_HARD_S (default 590).
# Writes gpu_soak_cuda_<date>.json under $OUT: commit it and pass it as the next session's PREV_SOAK
# (a later call on the same warm machine resumes from its /tmp copy).
# From the repo root, with KernelBench at .kb/KernelBench and the gymnasium wheels in .whl:
#   SOAK_MINUTES=8.4 bash benchmarks/h200_soak.sh   (PREV_SOAK=<a partial soak JSON> resumes one)
set -u
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
RESUME=()
[ -n "${PREV_SOAK:-}" ] && RESUME=(--resume "$PREV_SOAK")
if [ -f /tmp/cg_soak_state.json ]; then  # an earlier call on this machine: resume from its verdicts
  echo "resuming from this machine's /tmp/cg_soak_state.json"
  RESUME=(--resume /tmp/cg_soak_state.json)
fi
CUDA_GYM_CACHE=/tmp/cg_soak timeout "${SOAK_HARD_S:-590}" python3 benchmarks/gpu_soak.py --n 1000 "${RESUME[@]}" \
  --max-minutes "${SOAK_MINUTES:-8.5}" --out "$OUT" > "$OUT/soak.log" 2>&1
echo "soak rc=$?"
grep -v "it/s\]\|s/it\]" "$OUT/soak.log" | tail -25
cp "$OUT"/gpu_soak_cuda_*.json /tmp/cg_soak_state.json 2>/dev/null  # for the next call on this machine
