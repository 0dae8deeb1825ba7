"""Grouped bar charts as PNG: one group per row of a table (a round, a configuration), one bar per
series (TTFT P50, P95). Log scale by default, since a one-at-a-time baseline and a batching server
differ by orders of magnitude. matplotlib draws it where installed; otherwise bench/png_canvas.py
(bars, decade grid, labels in a bitmap font), so every run leaves a picture.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from bench.png_canvas import GLYPH_H, Canvas

COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40))
Series = dict[str, Sequence[float | None]]  # name -> one value per group (None: no bar)


def _decades(values: list[float]) -> tuple[int, int]:
    low = math.floor(math.log10(min(values)) - 1e-9)  # a value on a decade still gets a visible bar
    high = math.ceil(math.log10(max(values)))
    return low, max(high, low + 1)


def write_bar_chart(path: str | Path, title: str, groups: Sequence[str], series: Series, ylabel: str) -> str | None:
    """Write the chart; the backend that drew it ("matplotlib" or "builtin"), None with nothing to draw."""
    values = [v for vs in series.values() for v in vs if v is not None and v > 0]
    if not values or not groups:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _builtin_chart(Path(path), title, groups, series, ylabel, values)
        return "builtin"
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups)), 4.5))
    width = 0.8 / len(series)
    for k, (name, vs) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        heights = [v if v is not None and v > 0 else 0.0 for v in vs]
        bars = ax.bar(xs, heights, width, label=name, color=[c / 255 for c in COLORS[k % len(COLORS)]])
        if k == 0:  # a row that did not run has no bar and no label
            ax.bar_label(bars, labels=[f"{v:.0f}" if v else "" for v in heights], fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "matplotlib"


def _builtin_chart(path: Path, title: str, groups: Sequence[str], series: Series, ylabel: str,
                   values: list[float]) -> None:
    left, right, top, bottom = 70, 20, 50, 60
    group_w = max(90, 6 * max(len(g) for g in groups) + 12)
    width, height = left + right + group_w * len(groups), 420
    canvas = Canvas(width, height)
    low, high = _decades(values)
    plot_h = height - top - bottom

    def y_of(v: float) -> int:
        return top + round(plot_h * (1 - (math.log10(v) - low) / (high - low)))

    canvas.text(left, 10, title[: (width - left) // 6])
    canvas.text(4, top - 16, ylabel[:20])
    for d in range(low, high + 1):  # decade grid and its labels
        y = y_of(10.0 ** d)
        canvas.rect(left, y, width - right, y + 1, (220, 220, 220))
        label = f"{10.0 ** d:g}"
        canvas.text(left - 6 - Canvas.text_width(label), y - GLYPH_H // 2, label)
    canvas.rect(left, top, left + 1, height - bottom, (0, 0, 0))
    canvas.rect(left, height - bottom, width - right, height - bottom + 1, (0, 0, 0))
    bar_w = max(4, (group_w - 20) // len(series))
    for i, group in enumerate(groups):
        x0 = left + i * group_w + 10
        for k, vs in enumerate(series.values()):
            v = vs[i]
            if v is None or v <= 0:
                if k == 0:  # a row that did not run (n/a, not run, error) says so where its bar would be
                    canvas.text(x0, height - bottom - GLYPH_H - 4, "n/a")
                continue
            bx = x0 + k * bar_w
            canvas.rect(bx, y_of(v), bx + bar_w - 2, height - bottom, COLORS[k % len(COLORS)])
            if k == 0:
                canvas.text(bx, y_of(v) - GLYPH_H - 2, f"{v:.0f}")
        canvas.text(x0, height - bottom + 8, group[: (group_w - 10) // 6])
    for k, name in enumerate(series):  # legend
        x = left + 10 + k * 150
        canvas.rect(x, height - 20, x + 10, height - 10, COLORS[k % len(COLORS)])
        canvas.text(x + 14, height - 19, name[:22])
    canvas.save(path)
