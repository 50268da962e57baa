"""Combine verdict_profile.py runs (benchmarks/throughput.sh's A B A B) into one throughput record:
per pipeline variant the verdicts, wall seconds, verdicts per hour over its runs together, every
run's summary, and the identity candidates' speedups vs eager (the fidelity check: each should be
1.00x); at top level the faster variant's `verdicts_per_hour`, `verdicts` (the count) and the
`device`, as benchmarks/results/throughput/<device>/<date>.json keeps them.

    python benchmarks/throughput_summary.py $OUT/profile_*.json --out $OUT/throughput.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from verdict_profile import identity_speedups, identity_spread  # this folder, first on the path of a script here

RUN_KEYS = ("verdicts", "as_expected", "verdicts_per_hour", "wall_s", "median_eval_s", "eval_share_of_wall",
            "identity_speedup_vs_eager")


def variant_name(run: dict) -> str:
    """The pipeline, and the spare count and timing settings where they are not the defaults."""
    from cuda_gym.eval import EvalConfig
    from cuda_gym.eval.worker_setup import SPARE_WORKERS

    name = "prepare_during_jobs" if run.get("prepare_during_jobs") else "idle_device_spares"
    spares = run.get("eval_spares")
    if spares is not None and spares != SPARE_WORKERS[run.get("backend", "cuda")]["eval"]:
        name += f"_eval_spares={spares}"
    config, default = run.get("config", {}), EvalConfig()
    for key in ("timing_reps", "timing_budget_s"):
        if key in config and config[key] != getattr(default, key):
            name += f"_{key}={config[key]:g}"
    return name


def combine(runs: list[dict]) -> dict:
    variants: dict[str, dict] = {}
    identity: dict[str, list[float]] = {}
    for run in runs:
        summary = run.get("summary") or {}
        if not summary:
            continue  # a run cut before its first verdicts
        name = variant_name(run)
        variant = variants.setdefault(name, {"runs": [], "verdicts": 0, "as_expected": 0, "wall_s": 0.0})
        variant["runs"].append({"label": run.get("label", ""), **{key: summary.get(key) for key in RUN_KEYS}})
        variant["verdicts"] += summary["verdicts"]
        variant["as_expected"] += summary["as_expected"]
        variant["wall_s"] = round(variant["wall_s"] + summary["wall_s"], 1)
        identity.setdefault(name, []).extend(identity_speedups(run.get("verdicts", [])))
    for name, variant in variants.items():
        variant["verdicts_per_hour"] = round(3600 * variant["verdicts"] / variant["wall_s"], 1)
        variant["identity_speedup_vs_eager"] = identity_spread(identity.get(name, []))
    best = max(variants, key=lambda name: variants[name]["verdicts_per_hour"], default=None)
    return {"benchmark": "throughput", "device": next((r.get("device") for r in runs if r.get("device")), None),
            "variant": best, "verdicts_per_hour": variants[best]["verdicts_per_hour"] if best else None,
            "verdicts": variants[best]["verdicts"] if best else 0,
            "all_as_expected": all(v["as_expected"] == v["verdicts"] for v in variants.values()),
            "variants": variants}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+", help="verdict_profile.py JSON files")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    record = combine([json.loads(Path(path).read_text()) for path in args.profiles])
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({key: value for key, value in record.items() if key != "variants"}))
    for name, variant in record["variants"].items():
        print(name, variant["verdicts_per_hour"], variant["identity_speedup_vs_eager"])


if __name__ == "__main__":
    main()
