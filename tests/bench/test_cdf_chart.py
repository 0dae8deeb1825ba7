"""The TTFT CDF: without matplotlib the built-in drawing is a real PNG with the steps where the
samples put them, and a run's report always carries its plot."""
from __future__ import annotations

from bench.cdf_chart import LINE, nice_ceiling, write_cdf_chart
from bench.report import write_report
from test_png_canvas import decode, pixel


def test_nice_ceiling():
    assert [nice_ceiling(x) for x in (0.7, 1.0, 1.3, 2.2, 3.0, 7.0, 180.0, 0.0)] == \
        [1.0, 1.0, 2.0, 2.5, 5.0, 10.0, 200.0, 1.0]


def test_builtin_cdf_draws_each_step(tmp_path, no_matplotlib):
    path = tmp_path / "cdf.png"
    assert write_cdf_chart(path, "t", [100.0, 50.0, 150.0, 200.0], "TTFT (ms)") == "builtin"
    width, height, rows = decode(path.read_bytes())
    assert (width, height) == (640, 420)
    # Axes: left 60, right 20, top 40, bottom 50 -> x 0..200 ms on 560 px, y 0..1 on 330 px.
    px = lambda ms: 60 + round(560 * ms / 200)  # noqa: E731
    py = lambda f: 40 + round(330 * (1 - f))  # noqa: E731
    assert pixel(rows, px(75), py(0.25)) == LINE  # flat at 1/4 between 50 and 100 ms
    assert pixel(rows, px(175), py(0.75)) == LINE  # flat at 3/4 between 150 and 200 ms
    assert pixel(rows, px(75), py(0.75)) != LINE  # not reached yet at 75 ms
    assert pixel(rows, px(100), py(0.375)) == LINE  # the rise at 100 ms, from 1/4 to 1/2


def test_nothing_to_draw():
    assert write_cdf_chart("unused.png", "t", [], "ms") is None


def test_a_report_carries_its_plot_without_matplotlib(tmp_path, no_matplotlib):
    result = {"config": {"workload": "random", "concurrency": 2}, "machine": {"timestamp": "2026-01-01T00:00:00"},
              "metrics": {"completed": 2, "failed": 0, "duration_s": 1.0, "request_throughput": 2.0,
                          "output_throughput": 4.0, "total_token_throughput": 8.0, "max_concurrent_requests": 2,
                          "errors": [], **{f"{s}_{k}_ms": 1.0 for s in ("mean", "p50", "p95", "p99")
                                           for k in ("ttft", "tpot", "itl", "e2el")}},
              "samples": [{"ttft_s": 0.01, "success": True}, {"ttft_s": 0.02, "success": True}]}
    paths = write_report(result, tmp_path)
    assert paths["ttft_cdf"].endswith("_ttft_cdf.png")
    decode(open(paths["ttft_cdf"], "rb").read())
