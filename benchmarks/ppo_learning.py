"""Does the PPO trainer learn? A tiny randomly initialised policy on the `menu` toy (agents/ppo/menu.py),
with the real KernelEnv on the CPU backend judging every candidate.

Two conditions, each over several seeds, the same number of PPO updates:
- "ppo": PPO from the random policy;
- "rft+value+ppo": CUDA Agent's order: sample `--warmup-batches` batches with the random policy,
  rejection fine-tuning on the R > 0 ones, value pretraining on all of them, then PPO.

Writes `<out>/ppo_learning_<backend>_<date>.json` (the menu's judged rewards, every update's
metrics per run, updates and episodes to reach the threshold) and a PNG of mean reward, entropy and
explained variance per update (the mean over seeds per condition). Runs in a few minutes on 2 cores:

    python benchmarks/ppo_learning.py --out $OUT
"""
from __future__ import annotations

import argparse
import json

from cuda_gym_agents.ppo.learning import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="cuda_gym_results", help="where the JSON and PNG go")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated seeds")
    parser.add_argument("--episodes-per-task", type=int, default=16)
    parser.add_argument("--warmup-batches", type=int, default=3)
    parser.add_argument("--backend", default="cpu", choices=["cpu"], help="the menu runs on the CPU only")
    args = parser.parse_args()
    result = run(args.out, updates=args.updates, seeds=tuple(int(s) for s in args.seeds.split(",")),
                 episodes_per_task=args.episodes_per_task, warmup_batches=args.warmup_batches, backend=args.backend,
                 progress=False)
    print(json.dumps({"menu": result["menu"], "threshold": result["threshold"], "summary": result["summary"],
                      "seconds": result["seconds"]}, indent=1))


if __name__ == "__main__":
    main()
