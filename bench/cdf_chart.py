"""A cumulative distribution as PNG (the TTFT CDF next to a run's table): the share of requests at or
below each latency, a step per sample. matplotlib draws it where installed; otherwise
bench/png_canvas.py does (axes, grid, the steps, labels in its bitmap font), so every run leaves
its plot without an optional package.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from bench.png_canvas import GLYPH_H, Canvas

LINE = (31, 119, 180)
GRID = (220, 220, 220)


def nice_ceiling(x: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k at or above x (an axis's end)."""
    if x <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(x))
    return next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= x * (1 - 1e-12))


def write_cdf_chart(path: str | Path, title: str, values: Sequence[float], xlabel: str) -> str | None:
    """Write the CDF of `values`; the backend that drew it ("matplotlib" or "builtin"), None when
    there is nothing to draw."""
    xs = sorted(values)
    if not xs:
        return None
    fractions = [(i + 1) / len(xs) for i in range(len(xs))]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _builtin_cdf(Path(path), title, xs, fractions, xlabel)
        return "builtin"
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(xs, fractions, where="post")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return "matplotlib"


def _builtin_cdf(path: Path, title: str, xs: list[float], fractions: list[float], xlabel: str) -> None:
    width, height = 640, 420
    left, right, top, bottom = 60, 20, 40, 50
    canvas = Canvas(width, height)
    x_end = nice_ceiling(xs[-1])
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> int:
        return left + round(plot_w * x / x_end)

    def py(f: float) -> int:
        return top + round(plot_h * (1 - f))

    canvas.text(left, 12, title[: (width - left) // 6])
    for k in range(5):  # grid: quarters of both axes, with their labels
        f, x = k / 4, x_end * k / 4
        canvas.rect(left, py(f), width - right, py(f) + 1, GRID)
        canvas.rect(px(x), top, px(x) + 1, height - bottom, GRID)
        canvas.text(left - 6 - Canvas.text_width(f"{f:g}"), py(f) - GLYPH_H // 2, f"{f:g}")
        canvas.text(px(x) - Canvas.text_width(f"{x:g}") // 2, height - bottom + 6, f"{x:g}")
    canvas.rect(left, top, left + 1, height - bottom, (0, 0, 0))
    canvas.rect(left, height - bottom, width - right, height - bottom + 1, (0, 0, 0))
    previous = 0.0
    for x, f in zip(xs, fractions):  # each sample: a rise at its value, then flat to the next one
        canvas.rect(px(x) - 1, py(f), px(x) + 1, py(previous) + 1, LINE)
        previous = f
    for (x0, f), x1 in zip(zip(xs, fractions), xs[1:] + [x_end]):
        canvas.rect(px(x0), py(f) - 1, px(x1) + 1, py(f) + 1, LINE)
    canvas.text(left + plot_w // 2 - Canvas.text_width(xlabel) // 2, height - 18, xlabel)
    canvas.save(path)
