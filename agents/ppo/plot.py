"""Training curves as a PNG: mean reward, entropy and explained variance per update (matplotlib,
`pip install 'cuda_gym[plot]'`)."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

PANELS = (("mean_reward", "mean reward"), ("entropy", "entropy (nats/token)"),
          ("explained_variance", "explained variance"))


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, float]]], path: str | Path, title: str = "") -> Path:
    """One line per run (label -> its metrics lines, as in metrics.jsonl) in each of the three
    panels; undefined values (None / NaN) leave gaps. Explained variance is clipped to [-1, 1] on the
    plot (a critic worse than a constant reads as -1). Raises ImportError without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'cuda_gym[plot]'") from None
    figure, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6))
    for axis, (key, label) in zip(axes, PANELS):
        for run, history in runs.items():
            xs = [line["update"] for line in history]
            ys = [float("nan") if line.get(key) is None else float(line[key]) for line in history]
            if key == "explained_variance":
                ys = [min(max(y, -1.0), 1.0) if y == y else y for y in ys]
            axis.plot(xs, ys, marker=".", label=run)
        axis.set_xlabel("update")
        axis.set_title(label)
        axis.grid(alpha=0.3)
    axes[0].legend()
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
