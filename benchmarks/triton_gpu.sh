#!/usr/bin/env bash
# Triton candidates on the GPU, in one device call, results under $OUT:
#   1. every Triton reference solution judged (strict, fp32, eager and torch.compile baselines):
#      verdict, speedups, compile seconds;
#   2. the median compile-plus-first-call seconds (fresh process, empty caches, REPEATS times) of
#      each task's Triton solution beside its CUDA solution (cuda_gym.native.load_kernels);
#      1 and 2 go to $OUT/triton_gpu_<date>.json (benchmarks/triton_gpu.py);
#   3. the Triton hostile files (tests/hostile/cpu_triton_*) judged by the CUDA evaluator
#      (tests/test_hostile.py -m gpu -k triton), each followed by the task's honest solution:
#      $OUT/hostile_triton_<date>.xml (junit) and .log.
# From the repo root, with triton installed (pip install -e ".[triton]" or the carried wheels).
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
DATE=$(date +%Y-%m-%d)
elapsed() { echo $(( $(date +%s) - START )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee "$OUT/versions.txt"
timeout "${SOLUTIONS_S:-420}" python3 benchmarks/triton_gpu.py --backend cuda --repeats "${REPEATS:-3}" \
  --out "$OUT/triton_gpu_$DATE.json" > "$OUT/triton_gpu_$DATE.log" 2>&1
echo "solutions + latency rc=$? at $(elapsed) s"; tail -20 "$OUT/triton_gpu_$DATE.log"
timeout "${HOSTILE_S:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests/test_hostile.py \
  -k "triton" --junitxml "$OUT/hostile_triton_$DATE.xml" > "$OUT/hostile_triton_$DATE.log" 2>&1
echo "hostile rc=$? at $(elapsed) s"; grep -E "passed|failed|skipped|Error" "$OUT/hostile_triton_$DATE.log" | tail -12
echo "call took $(elapsed) s"
