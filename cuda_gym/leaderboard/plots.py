"""The leaderboard's pictures (matplotlib, `pip install 'cuda_gym[plot]'`).

- fast_p.png: fast_p as a function of p (a step curve over a fine grid of p, the standard
  thresholds marked), one panel per baseline, one line per level plus the overall line; a
  comparison run's overall line is dashed.
- speedups.png: the speedups of the correct candidates per level (a box and every point, log
  scale, 1x marked), one panel per baseline, with the number of failed tasks under each level.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .metrics import BASELINES, Row, rows_of

P_AXIS_MAX = 5.0  # fast_p's x axis ends here at most: the thresholds that matter are <= 2
LABELLED_POINTS = 10  # a level with at most this many correct candidates gets each point named
_LEVEL_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("the leaderboard plots need matplotlib: pip install 'cuda_gym[plot]' "
                          "(or pass --no-plots)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _tasks(count: int) -> str:
    return f"{count} task" + ("" if count == 1 else "s")


def _measured(record: dict[str, Any]) -> list[str]:
    return [b for b in BASELINES if b in record["config"]["baselines"]]


def _fast_curve(rows: list[Row], baseline: str, grid: list[float]) -> list[float]:
    speedups = [s for s in (r.speedup(baseline) for r in rows) if s is not None]
    return [sum(1 for s in speedups if s > p) / len(rows) for p in grid] if rows else [0.0] * len(grid)


def plot_fast_p(record: dict[str, Any], path: Path, compare: dict[str, Any] | None = None) -> Path:
    plt = _pyplot()
    measured = _measured(record) or ["eager"]
    rows = rows_of(record)
    shown = rows + (rows_of(compare) if compare is not None else [])
    largest = max([s for r in shown for b in measured if (s := r.speedup(b)) is not None] + [2.0])
    p_max = min(max(2.5, 1.1 * largest), P_AXIS_MAX)
    grid = [p_max * i / 600 for i in range(601)]
    levels = sorted({r.level for r in rows})
    fig, axes = plt.subplots(1, len(measured), figsize=(6.2 * len(measured), 4.6), squeeze=False, sharey=True)
    for ax, baseline in zip(axes[0], measured):
        for index, level in enumerate(levels if len(levels) > 1 else []):  # one level: its line is the overall one
            level_rows = [r for r in rows if r.level == level]
            ax.step(grid, _fast_curve(level_rows, baseline, grid), where="post", lw=1.6,
                    color=_LEVEL_COLOURS[index % len(_LEVEL_COLOURS)], label=f"L{level} ({_tasks(len(level_rows))})")
        ax.step(grid, _fast_curve(rows, baseline, grid), where="post", lw=2.6, color="black",
                label=f"overall ({_tasks(len(rows))})")
        thresholds = record["thresholds"]
        ax.plot(thresholds, _fast_curve(rows, baseline, [p + 1e-12 for p in thresholds]), "o", color="black", ms=5)
        if compare is not None and baseline in compare["config"]["baselines"]:
            other = rows_of(compare)
            ax.step(grid, _fast_curve(other, baseline, grid), where="post", lw=2.2, ls="--", color="#d62728",
                    label=f"{compare.get('name') or 'other'}: overall ({_tasks(len(other))})")
        ax.axvline(1.0, color="grey", lw=0.8, ls=":")
        ax.set_xlim(0, p_max)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(f"p (speedup threshold vs {'torch.compile' if baseline == 'compile' else 'eager PyTorch'})")
        ax.set_title(f"fast_p vs {baseline}")
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:.0f}%"))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    axes[0][0].set_ylabel("share of tasks correct and faster than p")
    fig.suptitle(f"{record['name']}: fast_p ({record['backend']}, seed {record['seed']['value']})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def plot_speedups(record: dict[str, Any], path: Path, compare: dict[str, Any] | None = None) -> Path:
    plt = _pyplot()
    measured = _measured(record) or ["eager"]
    rows = rows_of(record)
    levels = sorted({r.level for r in rows})
    runs = [(record.get("name") or "this run", rows)]
    if compare is not None:
        runs.append((compare.get("name") or "other", rows_of(compare)))
    fig, axes = plt.subplots(1, len(measured), figsize=(6.2 * len(measured), 4.6), squeeze=False)
    width = 0.7 / len(runs)
    for ax, baseline in zip(axes[0], measured):
        values_all = []
        for run_index, (run_name, run_rows) in enumerate(runs):
            colour = "#1f77b4" if run_index == 0 else "#d62728"
            for position, level in enumerate(levels):
                level_rows = [r for r in run_rows if r.level == level]
                speedups = [s for s in (r.speedup(baseline) for r in level_rows) if s is not None]
                x = position + (run_index - (len(runs) - 1) / 2) * width
                if speedups:
                    values_all += speedups
                    ax.boxplot([speedups], positions=[x], widths=width * 0.8, showfliers=False,
                               medianprops={"color": colour, "lw": 2}, boxprops={"color": colour},
                               whiskerprops={"color": colour}, capprops={"color": colour})
                    jitter = [x + width * 0.3 * (((i * 0.618) % 1.0) - 0.5) for i in range(len(speedups))]
                    ax.scatter(jitter, speedups, s=18, color=colour, alpha=0.75, zorder=3,
                               label=run_name if position == 0 and len(runs) > 1 else None)
                    if len(runs) == 1 and len(speedups) <= LABELLED_POINTS:
                        names = [r.task_id.rsplit("/", 1)[-1] for r in level_rows if r.speedup(baseline) is not None]
                        for px, py, label in zip(jitter, speedups, names):
                            ax.annotate(label, (px, py), xytext=(6, 0), textcoords="offset points", fontsize=6.5,
                                        va="center", color="#333333",
                                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.7})
                timed = f"{len(speedups)}/{len(level_rows)} correct"
                ax.annotate(timed if len(runs) == 1 else f"{run_name}:\n{timed}", (x, 0),
                            xycoords=("data", "axes fraction"), xytext=(0, -22), textcoords="offset points",
                            ha="center", va="top", fontsize=7.5, color=colour)
        ax.set_yscale("log", base=2)
        low = min(values_all + [0.5])
        high = max(values_all + [2.0])
        ax.set_ylim(low / 1.3, high * 1.3)
        ticks = [2.0 ** k for k in range(math.ceil(math.log2(low / 1.3)), math.floor(math.log2(high * 1.3)) + 1)]
        ax.set_yticks(ticks)
        ax.set_yticklabels([f"{t:g}x" for t in ticks])
        ax.axhline(1.0, color="grey", lw=1, ls="--")
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels([f"L{level}" for level in levels])
        ax.set_xlim(-0.6, len(levels) - 0.4)
        ax.set_ylabel(f"speedup vs {'torch.compile' if baseline == 'compile' else 'eager PyTorch'} (log scale)")
        ax.set_title(f"speedups of correct candidates vs {baseline}")
        ax.grid(axis="y", alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"{record['name']}: speedup per level ({record['backend']}, seed {record['seed']['value']})",
                 fontsize=11)
    fig.tight_layout()
    fig.subplots_adjust(bottom=0.2)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
