#!/usr/bin/env bash
# Everything we measure on the GPU machine, in one call (device time is scarce):
# GPU tests (reference solutions, KernelBench format, CUDA hostile catalogue), evaluation speed,
# compile latency. Writes logs and JSON under $OUT (or ./h200_out). Run from the repo root:
#   bash benchmarks/h200_session.sh
set -u
source benchmarks/h200_env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
export CUDA_GYM_TEST_CACHE=/tmp/cg-test-cache CUDA_GYM_PCH_DIR=/tmp/cg-test-cache/pch
# Which confinement the CUDA driver tolerates; if the eval workers' order fails, the rest of the
# session runs without Landlock (and says so) rather than failing every CUDA evaluation.
if [ "${PROBE:-1}" = 1 ]; then
  timeout 300 python3 benchmarks/cuda_sandbox_probe.py --out "$OUT" 2>&1 | tail -12
  if [ "${PIPESTATUS[0]}" != 0 ]; then echo "PROBE FAILED: CUDA_GYM_SANDBOX_WRITES=0 for this session"; export CUDA_GYM_SANDBOX_WRITES=0; fi
fi
[ "${STABILITY_S:-0}" -gt 0 ] && timeout "${STABILITY_S}" python3 benchmarks/timing_stability.py --processes 8 --out "$OUT" 2>&1 | tail -14
[ "${PCH:-0}" = 1 ] && python3 -m cuda_gym.eval.fastbuild "$CUDA_GYM_PCH_DIR" | tail -1  # precompiled headers (trusted)
[ "${PCH:-0}" = bg ] && (python3 -m cuda_gym.eval.fastbuild "$CUDA_GYM_PCH_DIR" > "$OUT/pch.log" 2>&1 &)
# Held timer repeats (on unless CUDA_GYM_TIMER_HOLD=0): check them first; if they fail, the session runs without.
if [ "${CUDA_GYM_TIMER_HOLD:-1}" != 0 ] && ! timeout 120 python3 benchmarks/timer_check.py; then
  echo "TIMER CHECK FAILED: CUDA_GYM_TIMER_HOLD=0 for this session"; export CUDA_GYM_TIMER_HOLD=0
fi
[ "${GPU_TEST_S:-420}" -gt 0 ] && timeout "${GPU_TEST_S:-420}" python3 -m pytest -m gpu -q -s -p no:cacheprovider tests/ 2>&1 \
  | grep -v "^\s*$" | tee "$OUT/pytest_gpu.log" | tail -25
[ "${SPEED_S:-220}" -gt 0 ] && timeout "${SPEED_S:-220}" python3 benchmarks/evaluation_speed.py --backend cuda --no-compile-baseline \
  --sections "${SECTIONS:-latency,throughput,fidelity,env}" --repeats "${REPEATS:-3}" \
  --stream "${STREAM:-32}" --fidelity-repeats 10 --fidelity-tasks "${FIDELITY_TASKS:-builtin/L1/gelu,builtin/L1/softmax,builtin/L1/cumsum,builtin/L2/linear_gelu}" \
  --out "$OUT" 2>&1 | grep -v "it/s\]\|s/it\]" | tail -40
[ "${COMPILE_S:-0}" -gt 0 ] && timeout "${COMPILE_S}" python3 benchmarks/compile_latency.py --backend cuda --repeats 1 \
  --forms "${FORMS:-native,load_inline,load_inline_split,load_inline_split_O3,load_inline_stripped}" --out "$OUT" 2>&1 | tail -6
