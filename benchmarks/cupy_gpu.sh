#!/usr/bin/env bash
# CuPy candidates on the GPU, results under $OUT. PHASE picks what one device call runs (a call is
# limited to 10 minutes; "all" fits only with small REPEATS):
#   solutions  every CuPy reference solution judged (strict, fp32, eager and torch.compile
#              baselines): verdict, speedups, compile seconds -> $OUT/cupy_gpu_solutions_<date>.json
#   latency    median cold compile-plus-first-call seconds (fresh process, empty caches) of the
#              CuPy, native and load_inline forms of the same tasks -> $OUT/cupy_gpu_latency_<date>.json
#   hostile    the CuPy hostile files (tests/hostile/cuda_cupy_*) judged by the CUDA evaluator, each
#              followed by the task's honest solution -> $OUT/hostile_cupy_<date>.xml (junit) and .log
# From the repo root, with cupy-cuda13x installed (the device image ships CuPy 14.2).
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
DATE=$(date +%Y-%m-%d)
PHASE=${PHASE:-all}
elapsed() { echo $(( $(date +%s) - START )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__, 'nvrtc', cupy.cuda.nvrtc.getVersion())" \
  | tee "$OUT/versions.txt"
if [ "$PHASE" = all ] || [ "$PHASE" = solutions ]; then
  timeout "${SOLUTIONS_S:-300}" python3 benchmarks/cupy_gpu.py --backend cuda --skip-latency \
    --out "$OUT/cupy_gpu_solutions_$DATE.json" > "$OUT/cupy_gpu_solutions_$DATE.log" 2>&1
  echo "solutions rc=$? at $(elapsed) s"; tail -12 "$OUT/cupy_gpu_solutions_$DATE.log"
fi
if [ "$PHASE" = all ] || [ "$PHASE" = latency ]; then
  timeout "${LATENCY_S:-420}" python3 benchmarks/cupy_gpu.py --backend cuda --skip-judging --repeats "${REPEATS:-3}" \
    --inline-repeats "${INLINE_REPEATS:-1}" --out "$OUT/cupy_gpu_latency_$DATE.json" > "$OUT/cupy_gpu_latency_$DATE.log" 2>&1
  echo "latency rc=$? at $(elapsed) s"; tail -12 "$OUT/cupy_gpu_latency_$DATE.log"
fi
if [ "$PHASE" = all ] || [ "$PHASE" = hostile ]; then
  timeout "${HOSTILE_S:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests/test_hostile.py \
    tests/test_cupy.py -k "cupy" --junitxml "$OUT/hostile_cupy_$DATE.xml" > "$OUT/hostile_cupy_$DATE.log" 2>&1
  echo "hostile rc=$? at $(elapsed) s"; grep -E "passed|failed|skipped|Error" "$OUT/hostile_cupy_$DATE.log" | tail -12
fi
echo "call took $(elapsed) s"
