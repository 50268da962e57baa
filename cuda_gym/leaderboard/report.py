"""leaderboard.md: the run's header (with the revealed seed), summary, fast_p, per-task tables and,
with a comparison run, both side by side."""
from __future__ import annotations

from typing import Any

from .metrics import BASELINES, threshold_key


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _delta(this: float | None, other: float | None, percent: bool) -> str:
    if this is None or other is None:
        return "-"
    diff = this - other
    return f"{100 * diff:+.0f} pt" if percent else f"{diff:+.2f}x"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return lines


def _measured(record: dict[str, Any]) -> list[str]:
    return [b for b in BASELINES if b in record["config"]["baselines"]]


def markdown(record: dict[str, Any], compare: dict[str, Any] | None = None, images: list[str] = ()) -> str:
    seed = record["seed"]
    config = record["config"]
    measured = _measured(record)
    summary = record["summary"]
    seed_line = (f"**Hidden seed: {seed['value']}**: drawn for this run and revealed only now that every verdict "
                 f"is in; `--seed {seed['value']}` repeats these inputs." if seed["mode"] == "secret" else
                 f"**Seed: {seed['value']}** (given with `--seed`: this run repeats a revealed one, its inputs were "
                 "known in advance)")
    lines = [
        f"# Leaderboard: {record['name']}",
        "",
        f"{record['date']} · backend {record['backend']} ({record['device']}) · suite {record['suite'] or '-'} · "
        f"{summary['overall']['tasks']} tasks · submissions: `{record['submissions']}` ({record['submission_kind']})",
        "",
        seed_line,
        "",
        f"Precision {config['precision']}, policy {config['policy']}, {config['correctness_trials']} correctness "
        f"draws, baselines: {', '.join(measured) or 'none'}. fast_p = share of all tasks that are correct and more "
        f"than p times faster than the baseline. Geomean (correct) is over the correct candidates; geomean (all) "
        f"counts every other task as {record['failure_speedup']:g}x.",
        "",
    ]
    lines += ["## Summary", ""]
    header = ["level", "tasks", "submitted", "correct", "pass rate"]
    for b in measured:
        header += [f"fast_1 vs {b}", f"geomean vs {b} (correct)", f"geomean vs {b} (all)"]
    body = []
    for group, m in summary.items():
        cells = [group, str(m["tasks"]), str(m["submitted"]), str(m["correct"]), _pct(m["pass_rate"])]
        for b in measured:
            cells += [_pct(m["fast_p"][b][threshold_key(1.0)]), _x(m["geomean_correct"][b]), _x(m["geomean_all"][b])]
        body.append(cells)
    lines += _table(header, body) + [""]

    lines += ["## fast_p", ""]
    thresholds = record["thresholds"]
    header = ["level", "baseline"] + [f"fast_{threshold_key(p)}" for p in thresholds]
    body = [[group, b] + [_pct(m["fast_p"][b][threshold_key(p)]) for p in thresholds]
            for b in measured for group, m in summary.items()]
    lines += _table(header, body) + [""]
    for image in images:
        lines += [f"![{image}]({image})", ""]

    if compare is not None:
        lines += _comparison(record, compare)

    lines += ["## Per task", ""]
    header = ["task", "verdict", "time ms", "eager ms", "compile ms", "vs eager", "vs compile", "note"]
    body = [[e["task_id"], e["verdict"], _ms(e["time_ms"]), _ms(e["eager_ms"]), _ms(e["compile_ms"]),
             _x(e["speedup_vs_eager"]), _x(e["speedup_vs_compile"]), e["message"].replace("|", "\\|")[:120]]
            for e in record["results"]]
    lines += _table(header, body) + [""]
    verdicts = summary["overall"]["verdicts"]
    lines += ["Verdicts: " + ", ".join(f"{k} {v}" for k, v in verdicts.items()), ""]
    if record["unmatched"]:
        lines += ["## Not judged (no selected task)", ""] + [f"- {item}" for item in record["unmatched"]] + [""]
    return "\n".join(lines)


def _comparison(record: dict[str, Any], compare: dict[str, Any]) -> list[str]:
    other_name = compare.get("name") or "other"
    lines = [f"## Compared with {other_name}", "",
             f"{other_name}: {compare.get('date', '')}, backend {compare.get('backend')} ({compare.get('device')}), "
             f"seed {compare.get('seed', {}).get('value')}.", ""]
    ours = {e["task_id"] for e in record["results"]}
    theirs = {e["task_id"] for e in compare["results"]}
    if record["config"].get("confirm_faster") != compare["config"].get("confirm_faster"):
        lines += ["The runs timed milestone claims differently (`confirm_faster` "
                  f"{record['config'].get('confirm_faster')} here, {compare['config'].get('confirm_faster')} there: "
                  "None in records that predate the option): their fast_p rates and geomeans are not measured alike.", ""]
    if ours != theirs:
        lines += [f"The runs judged different tasks ({len(ours)} here, {len(theirs)} there, {len(ours & theirs)} in "
                  "both): their rates and geomeans are over different sets.", ""]
    measured = [b for b in _measured(record) if b in compare["config"]["baselines"]]
    header = ["level", "metric", record["name"], other_name, "difference"]
    body = []
    for group, m in record["summary"].items():
        o = compare["summary"].get(group)
        if o is None:
            continue
        body.append([group, "pass rate", _pct(m["pass_rate"]), _pct(o["pass_rate"]),
                     _delta(m["pass_rate"], o["pass_rate"], True)])
        for b in measured:
            for p in (1.0, 1.5, 2.0):
                key = threshold_key(p)
                body.append([group, f"fast_{key} vs {b}", _pct(m["fast_p"][b][key]), _pct(o["fast_p"][b][key]),
                             _delta(m["fast_p"][b][key], o["fast_p"][b][key], True)])
            for kind in ("geomean_correct", "geomean_all"):
                body.append([group, f"{kind.replace('_', ' (')}) vs {b}", _x(m[kind][b]), _x(o[kind][b]),
                             _delta(m[kind][b], o[kind][b], False)])
    lines += _table(header, body) + [""]
    others = {e["task_id"]: e for e in compare["results"]}
    header = ["task", f"{record['name']}", other_name]
    body = []
    for e in record["results"]:
        o = others.get(e["task_id"])
        body.append([e["task_id"], f"{e['verdict']} {_x(e['speedup_vs_eager'])}",
                     f"{o['verdict']} {_x(o['speedup_vs_eager'])}" if o else "not in that run"])
    lines += ["Per task (verdict, speedup vs eager):", ""] + _table(header, body) + [""]
    return lines
