"""The workspace environment played through its tools with a candidate in CUDA Agent's layout, and
how well `profile`'s per-kernel device times add up to the timed medians.

The candidate is benchmarks/candidates/workspace_softmax/ (model_new.py, kernels/softmax.cu, its cpu
twin kernels/softmax.cpp, kernels/softmax_binding.cpp) for builtin/L1/softmax. The episode:
profile (the reference alone), write the files, compile, verify, profile, submit. For every judged
forward with a kernel profile (the reference eager and under torch.compile, profiled in the
baseline workers; the candidate, in its eval worker) it reports the sum of the per-kernel device times of the one profiled forward against
the median of the timed repeats, and whether they agree within 10%. Writes
<out>/workspace_profile_<backend>_<date>.json.

    python benchmarks/workspace_profile.py --out "$OUT"          # the H200 (backend cuda)
    python benchmarks/workspace_profile.py --backend cpu           # the episode on a CPU (no kernel profile)
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path

from cuda_gym.envs.workspace_env import WorkspaceEnv, profile_agreement
from cuda_gym.eval import EvalConfig, Evaluator

CANDIDATE = Path(__file__).resolve().parent / "candidates" / "workspace_softmax"
TASK = "builtin/L1/softmax"


def call(name: str, **arguments: str) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def agreement(label: str, profile: list | None, stats: dict | None, **context: object) -> dict:
    """Sum of the per-kernel device times of one profiled forward vs the timed median, and vs the
    device time of the held timed calls where the timer held them (their median is the larger of
    device time and host issue time, so a host-bound call's median is host time)."""
    stats = stats or {}
    median, detail = stats.get("median_ms"), stats.get("detail") or {}
    entry = {"label": label, **context, "profiled": bool(profile), "kernels": (profile or [])[:10], "median_ms": median,
             "timing_method": stats.get("method"), "held_device_ms": detail.get("held_device_ms"),
             "held_issue_ms": detail.get("held_issue_ms")}
    if profile and median:
        numbers = profile_agreement(profile, median, detail)
        entry.update(kernel_sum_ms=round(numbers["kernel_sum_ms"], 5), ratio=round(numbers["ratio"], 4),
                     within_10pct=abs(numbers["ratio"] - 1) <= 0.10)
        if "ratio_to_held_device" in numbers:
            entry.update(ratio_to_held_device=round(numbers["ratio_to_held_device"], 4),
                         within_10pct_of_held_device=abs(numbers["ratio_to_held_device"] - 1) <= 0.10,
                         host_bound=numbers["host_bound"])
    return entry


def candidate_agreement(result: dict | None) -> dict:
    if not result:
        return {"label": "candidate", "profiled": False, "why": "no result"}
    return agreement("candidate", result.get("kernel_profile"), result.get("candidate_time"),
                     error_code=result.get("error_code"), message=(result.get("message") or "")[:400])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "cuda_gym_results"))
    parser.add_argument("--baseline-workers", type=int, default=1,
                        help="fresh workers per baseline (default 1 to save device time; the recommended config has 3)")
    args = parser.parse_args()
    config = EvalConfig(baseline_workers=args.baseline_workers)
    files = {p.relative_to(CANDIDATE).as_posix(): p.read_text() for p in sorted(CANDIDATE.rglob("*")) if p.is_file()}
    steps = []
    started = time.monotonic()
    with Evaluator(args.backend, config) as evaluator:
        env = WorkspaceEnv(backend=args.backend, evaluator=evaluator, max_turns=20)
        env.reset(options={"task_id": TASK})
        actions = ([call("profile")] + [call("write_file", path=path, content=text) for path, text in files.items()]
                   + [call("compile"), call("verify"), call("profile"), call("submit")])
        for action in actions:
            begun = time.monotonic()
            observation, reward, terminated, truncated, info = env.step(action)
            steps.append({"tool": info["tool"], "verdict": info["verdict"], "reward": reward,
                          "seconds": round(time.monotonic() - begun, 2), "observation": observation,
                          "result": info.get("result")})
            print(f"{info['tool']:>10}: {info['verdict']} ({steps[-1]['seconds']} s)", flush=True)
            if terminated or truncated:
                break
        reference = env.reference_profile()  # the baseline workers' profiled forwards
        device = evaluator.device_name
        env.close()
    profile_step = next((s for s in steps if s["tool"] == "profile" and s["result"]), None)
    checks = []
    for name, label in (("eager", "eager"), ("compile", "torch.compile")):
        entry = reference.get(name) or {}
        stats = entry.get("stats")
        checks.append(agreement(f"reference ({label})", entry.get("kernel_profile"),
                                dataclasses.asdict(stats) if stats else None, why=entry.get("why", "")))
    checks.append(candidate_agreement(profile_step["result"] if profile_step else None))
    record = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "task": TASK,
        "backend": args.backend, "device": device, "host": platform.node(), "config": dataclasses.asdict(config), "seconds": round(time.monotonic() - started, 1),
        "verdicts": {s["tool"] + f"#{i}": s["verdict"] for i, s in enumerate(steps)},
        "submit_ok": bool(steps and steps[-1]["tool"] == "submit" and steps[-1]["verdict"] == "OK"),
        "kernel_sum_vs_median": checks, "steps": steps,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"workspace_profile_{args.backend}_{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(record, indent=1))
    for check in checks:
        held = (f"; / held device time {check['held_device_ms']:.4g} ms = {check['ratio_to_held_device']:.3f}, "
                f"host-bound: {check['host_bound']}" if "ratio_to_held_device" in check else "")
        summary = (f"kernel sum {check['kernel_sum_ms']:.4g} ms / median {check['median_ms']:.4g} ms = "
                   f"{check['ratio']:.3f} (within 10%: {check['within_10pct']}){held}" if "ratio" in check else
                   f"no comparison ({check.get('error_code') or ''} {check.get('message') or check.get('why', '')})"[:300])
        print(f"{check['label']}: {summary}")
    print(f"submit OK: {record['submit_ok']}; wrote {path}")
    return 0 if record["submit_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
