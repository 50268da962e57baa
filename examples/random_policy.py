"""A scripted episode on a built-in task: a random action, a forbidden candidate, then the shipped
reference solution. Runs as written on a CPU-only machine (and on a GPU one).

    python examples/random_policy.py [--task builtin/L1/softmax] [--backend cpu] [--seed 0]
"""
from __future__ import annotations

import argparse

import gymnasium as gym

import cuda_gym  # noqa: F401  (registers the CudaKernel-* IDs)
from cuda_gym.eval import EvalConfig
from cuda_gym.tasks import load_suite, solution_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", help="a built-in task id; default: a random task that has a shipped solution")
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    # Only the eager baseline: torch.compile's baseline costs ~20 s per task on a CPU.
    env = gym.make("CudaKernel-Builtin-v1", backend=args.backend, eval_config=EvalConfig(baselines=("eager",)),
                   max_turns=4)
    backend = env.unwrapped.backend  # "auto" resolves to what the evaluator's workers see
    with_solution = [t for t in load_suite("builtin") if solution_path(t, backend)]
    options = {"task_id": args.task} if args.task else {
        "task_id": with_solution[args.seed % len(with_solution)].id}
    prompt, info = env.reset(seed=args.seed, options=options)
    task = env.unwrapped.task
    print(f"task {info['task_id']} on {info['backend']}: prompt of {len(prompt)} characters")

    env.action_space.seed(args.seed)
    actions = [
        ("a random action", env.action_space.sample()[:200]),
        ("the reference itself (PyTorch ops: forbidden under the strict policy)",
         "#! check\n" + task.source + "\n\nclass ModelNew(Model):\n    pass\n"),
        ("the shipped reference solution", "#! submit\n" + solution_path(task, backend).read_text()),
    ]
    for label, action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        print(f"\n=== turn {info['turn']}: {label} -> {info['verdict']}, reward {reward:g}")
        print(observation)
        if terminated or truncated:
            break
    best = info["best"]
    if best["found"]:
        print(f"\nbest: turn {best['turn']}, {best['time_ms']:.4g} ms"
              + (f", x{best['speedup_vs_eager']:.2f} vs eager" if "speedup_vs_eager" in best else ""))
    env.close()


if __name__ == "__main__":
    main()
