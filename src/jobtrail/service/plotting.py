"""A run's series drawn as a PNG: one panel per group of metrics, steps on x, later attempts marked.

matplotlib (Agg, no display) is imported inside render(), so importing this module stays light.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobtrail.service.series import Point
from jobtrail.util.files import private_dir, private_open

# The panels people watch, in order; a panel is drawn when the run logged its first metric. GRPO's
# rewards come from TRL under these names (reward, reward_std, rewards/<function>/mean).
DEFAULT_PANELS: tuple[tuple[str, ...], ...] = (
    ("loss", "eval_loss"),
    ("reward",),
    ("reward_std",),
    ("rewards/margins",),
    ("rewards/accuracies",),
    ("grad_norm",),
    ("learning_rate",),
    ("tokens_per_second",),
)
# Metrics that share a panel with another one when both are asked for.
COMPANIONS = {"loss": ("eval_loss",), "reward": ("rewards/",)}
PANEL_WIDTH_IN, PANEL_HEIGHT_IN, DPI = 5.0, 3.0, 100


def panels(series: dict[str, list[Point]], asked: Sequence[str] | None, method: str) -> list[tuple[str, ...]]:
    """The panels to draw: the names asked for (loss with eval_loss, reward with each reward function), or the
    default panels the run has data for."""
    if asked:
        chosen = [_with_companions(name, series) for name in dict.fromkeys(asked)]
    else:
        chosen = [tuple(n for n in panel if n in series) for panel in DEFAULT_PANELS if panel[0] in series]
        if method == "grpo" and "reward" in series:
            chosen = [_with_companions("reward", series) if p[0] == "reward" else p for p in chosen]
    return [panel for panel in chosen if panel]


def _with_companions(name: str, series: dict[str, list[Point]]) -> tuple[str, ...]:
    extra = [
        other
        for prefix in COMPANIONS.get(name, ())
        for other in series
        if other != name and other.startswith(prefix) and (prefix != "rewards/" or other.endswith("/mean"))
    ]
    return (name, *extra)


def file_stem(chosen: Sequence[tuple[str, ...]]) -> str:
    """A file name for these panels: "loss-grad_norm-learning_rate" (capped, path-safe)."""
    stem = "-".join(panel[0] for panel in chosen)
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:80] or "metrics"


def render(
    series: dict[str, list[Point]],
    chosen: Sequence[tuple[str, ...]],
    marks: Sequence[tuple[int, str]],
    title: str,
    path: Path,
) -> Path:
    """Draw the panels into `path` (a PNG); `marks` are (step, label) lines where a later attempt began."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a server draws into files
    from matplotlib import pyplot as plt

    columns = 1 if len(chosen) == 1 else 2
    rows = math.ceil(len(chosen) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(PANEL_WIDTH_IN * columns, PANEL_HEIGHT_IN * rows), squeeze=False, dpi=DPI
    )
    try:
        for ax, panel in zip(axes.flat, chosen, strict=False):
            _draw_panel(ax, series, panel, marks)
        for ax in list(axes.flat)[len(chosen) :]:
            ax.set_visible(False)
        figure.suptitle(title, fontsize=10)
        figure.tight_layout()
        private_dir(path.parent)  # under jobtrail's home: the user's alone, like everything there
        with private_open(path, "wb") as png:
            figure.savefig(png, format="png")
    finally:
        plt.close(figure)
    return path


def _draw_panel(
    ax: Any, series: dict[str, list[Point]], panel: tuple[str, ...], marks: Sequence[tuple[int, str]]
) -> None:
    for name in panel:
        points = [(step, value) for step, value in series[name] if value is not None]
        if not points:
            continue
        steps, values = zip(*points, strict=True)
        style = {"marker": "o", "markersize": 3} if name.startswith("eval") or len(points) < 20 else {}
        ax.plot(steps, values, label=name, linewidth=1.2, **style)
    for step, label in marks:
        ax.axvline(step, color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(label, (step, 1.0), xycoords=("data", "axes fraction"), fontsize=7, va="top", rotation=90)
    ax.set_title(" & ".join(panel), fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
    if len(panel) > 1:
        ax.legend(fontsize=7)
