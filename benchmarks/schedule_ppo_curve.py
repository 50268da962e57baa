"""PPO and MaskablePPO against random search on one schedule-environment task, at an equal budget.

    python benchmarks/schedule_ppo_curve.py --backend cpu --task builtin/L1/matmul --budget 48 --seeds 0,1
    python benchmarks/schedule_ppo_curve.py --backend cuda --task builtin/L2/linear_gelu --budget 64 --out-dir $OUT

All methods share one ScheduleEnv (one evaluator, one result cache), so a configuration has the same
verdict and reward whichever method asks for it; the budget counts environment steps. Writes
schedule_ppo_<backend>_<date>.json (every step of every method, running bests, the comparison: final
best, distinct configurations, the step at which each method reached random search's final best) and
the running-best plot as .png.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--task", default="builtin/L2/linear_gelu")
    parser.add_argument("--budget", type=int, default=40, help="environment steps per method (default 40)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds; each runs every method (default 0)")
    parser.add_argument("--methods", default="random,maskable_ppo,ppo")
    parser.add_argument("--out-dir", default=os.environ.get("OUT") or "cuda_gym_results")
    parser.add_argument("--checkpoint-dir", default="cuda_gym_results/schedule_ppo_checkpoints",
                        help="where SB3 checkpoints go (not committed)")
    parser.add_argument("--full-timing", action="store_true",
                        help="the evaluator's default timing (slower); default: the test suite's short timing")
    args = parser.parse_args()

    from cuda_gym_agents.schedule_ppo import SchedulePPOConfig, compare_curves, random_search, train, write_curves
    from cuda_gym.envs.schedule_env import ScheduleEnv
    from cuda_gym.eval import EvalConfig, Evaluator

    config = EvalConfig() if args.full_timing else EvalConfig(
        baselines=("eager",) if args.backend == "cpu" else ("eager", "compile"), baseline_workers=1, timing_reps=5,
        timing_min_reps=3, warmup_reps=1, timing_budget_s=0.3)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M")
    started = time.time()
    curves = {}
    with Evaluator(args.backend, config) as evaluator:
        env = ScheduleEnv(suite=args.task.split("/", 1)[0], task_filter=args.task, backend=args.backend,
                          evaluator=evaluator)
        space_size = None
        seeds = [int(s) for s in args.seeds.split(",")]
        comparison = {}
        for seed in seeds:
            for method in args.methods.split(","):
                t0 = time.time()
                name = f"{method}@seed{seed}" if len(seeds) > 1 else method
                if method == "random":
                    curves[name] = random_search(env, args.budget, seed=seed)
                else:
                    run = train(env, SchedulePPOConfig(algorithm=method, budget=args.budget, seed=seed),
                                out_dir=Path(args.checkpoint_dir) / f"{args.backend}_{stamp}_{method}_{seed}")
                    curves[name] = run["curve"]
                if space_size is None:
                    space_size = env._space.size()
                best = max(r.reward for r in curves[name])
                print(f"{name}: {len(curves[name])} steps, best reward {best:.4f}, "
                      f"{env.evaluations} evaluations so far, {time.time() - t0:.0f} s", flush=True)
            suffix = f"@seed{seed}" if len(seeds) > 1 else ""
            comparison[f"seed{seed}"] = compare_curves({m: curves[m + suffix] for m in args.methods.split(",")})
        env.close()
    meta = {"date": dt.datetime.now().isoformat(timespec="seconds"), "task": args.task, "backend": args.backend,
            "budget": args.budget, "seeds": seeds, "configurations_in_space": space_size,
            "evaluations": env.evaluations, "seconds": round(time.time() - started, 1),
            "host": {"machine": platform.machine(), "python": platform.python_version()},
            "eval_config": {"baselines": list(config.baselines), "timing_reps": config.timing_reps},
            "title": f"{args.task} on {args.backend}: best log speedup vs evaluation requests"}
    stem = out_dir / f"schedule_ppo_{args.backend}_{stamp}"
    report = write_curves(stem.with_suffix(".json"), stem.with_suffix(".png"), curves, meta, comparison)
    print(report)
    print(f"wrote {stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
