"""Bar charts: the built-in drawing (no matplotlib) is a real PNG with one bar per value."""
from __future__ import annotations

import pytest

import bench.bar_chart as bar_chart
from test_png_canvas import decode, pixel


def test_builtin_chart_draws_a_bar_per_value_on_a_log_scale(tmp_path, no_matplotlib):
    path = tmp_path / "chart.png"
    backend = bar_chart.write_bar_chart(path, "title", ["slow", "skipped", "fast"],
                                        {"p50": [10000.0, None, 10.0], "p95": [20000.0, None, 30.0]}, "ms")
    assert backend == "builtin"
    width, height, rows = decode(path.read_bytes())
    blue, orange = bar_chart.COLORS[0], bar_chart.COLORS[1]
    bottom = height - 61  # one pixel above the x axis
    columns = [[pixel(rows, x, y) for y in range(bottom + 1)] for x in range(width)]  # above the axis
    blue_tops = [col.index(blue) for col in columns if blue in col]
    group_w = 90  # the narrowest group (short labels); the plot starts 70 pixels in
    assert not any(blue in col or orange in col for col in columns[70 + group_w:70 + 2 * group_w])  # no bar
    # the slow bar reaches three decades higher than the fast one: both drawn, the first far taller
    tall, short = min(blue_tops), max(blue_tops)
    assert bottom - tall > 2.5 * (bottom - short) > 0
    assert any(orange in col for col in columns)


def test_nothing_to_draw_writes_nothing(tmp_path):
    path = tmp_path / "none.png"
    assert bar_chart.write_bar_chart(path, "t", ["a"], {"p50": [None]}, "ms") is None
    assert not path.exists()


def test_matplotlib_when_installed(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "mpl.png"
    assert bar_chart.write_bar_chart(path, "t", ["a", "b"], {"p50": [1.0, 100.0]}, "ms") == "matplotlib"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
