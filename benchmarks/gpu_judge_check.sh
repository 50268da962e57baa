#!/usr/bin/env bash
# One device call that checks the judge's timed-call digests and switch watch on the GPU:
#   1. the CUDA hostile candidates named by HOSTILE (pytest -k expression) through tests/test_hostile.py;
#   2. the global switches switches.py finds on this build (switches_cuda.json), and whether any
#      moves over a workload of convolutions, matmuls, attention and a torch.compile'd model;
#   3. with RUN_BUILTIN=1, `cuda-gym run` on the built-in suite (every reference solution, cold caches);
#   4. benchmarks/timed_check_margin.py over KernelBench (LEVELS) until BUDGET_S seconds of the call,
#      resumed from PREV_MARGIN (an earlier call's margin.json) when given.
# Results under $OUT. From the repo root, with KernelBench at .kb/KernelBench and wheels in .whl/.
set -u
START=$(date +%s)
source benchmarks/h200_env.sh
export CUDA_GYM_KERNELBENCH=${CUDA_GYM_KERNELBENCH:-$PWD/.kb/KernelBench}
elapsed() { echo $(( $(date +%s) - START )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv | tee "$OUT/gpu.txt"
if [ -n "${HOSTILE:-}" ]; then
  timeout "${HOSTILE_S:-240}" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_hostile.py -k "$HOSTILE" \
    -o addopts="" > "$OUT/hostile_gpu.log" 2>&1
  echo "hostile rc=$? at $(elapsed) s"; grep -E "passed|failed|PASS|FAIL|Error" "$OUT/hostile_gpu.log" | tail -12
fi
timeout 120 python3 - > "$OUT/switches_cuda.json" 2> "$OUT/switches_cuda.err" <<'PY'
import json, torch, torch.nn.functional as F
from cuda_gym.eval.worker_device import warm_up_kernels
from cuda_gym.eval.switches import Switches
warm_up_kernels("cuda")  # as every worker does before its snapshot
s = Switches("cuda")
x = torch.randn(8, 64, 32, 32, device="cuda"); w = torch.randn(64, 64, 3, 3, device="cuda")
q = torch.randn(4, 8, 256, 64, device="cuda")
with torch.no_grad():
    F.conv2d(x, w); x.flatten(1) @ torch.randn(65536, 128, device="cuda")
    F.scaled_dot_product_attention(q, q, q)
    torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()).cuda())(torch.randn(32, 64, device="cuda"))
torch.cuda.synchronize()
print(json.dumps({"switches": s.names(), "changed_by_workload": s.changed()}, indent=1))
PY
echo "switches rc=$? at $(elapsed) s"; python3 -c "import json;d=json.load(open('$OUT/switches_cuda.json'));print(len(d['switches']),'switches; changed by workload:',d['changed_by_workload'])"
if [ "${RUN_BUILTIN:-0}" = 1 ]; then
  CUDA_GYM_CACHE=/tmp/cg_run_cold timeout "${RUN_S:-240}" python3 -m cuda_gym.cli run --backend cuda \
    --out "$OUT/run_cuda.json" > "$OUT/run_cuda.log" 2>&1
  echo "cuda-gym run rc=$? at $(elapsed) s"; grep -v "it/s\]\|s/it\]" "$OUT/run_cuda.log" | tail -25
fi
[ -n "${PREV_MARGIN:-}" ] && cp "$PREV_MARGIN" "$OUT/margin.json"
LEFT_S=$(( ${BUDGET_S:-540} - $(elapsed) ))
if [ "$LEFT_S" -ge 60 ]; then
  timeout $(( ${HARD_S:-585} - $(elapsed) )) python3 benchmarks/timed_check_margin.py --suite kernelbench --backend cuda \
    --levels "${LEVELS:-1,2,3}" --secrets "${SECRETS:-10}" --max-minutes "$(python3 -c "print(round(($LEFT_S - 20) / 60, 2))")" \
    --out "$OUT/margin.json" > "$OUT/margin.log" 2>&1
  echo "margin rc=$? at $(elapsed) s"; tail -12 "$OUT/margin.log"
fi
echo "call took $(elapsed) s"
