"""`ttft bench --ablate interference` against real `ttft serve --model dummy:tiny` processes, one with
concurrent lanes and one without: every request answered with the prompt it was sent, and the
table's figures the ratios of the samples written beside them."""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pytest

from bench.cli import add_bench_arguments, run_bench_command

SMALL = ["--streams", "2", "--long-prompt-len", "600", "--long-every-s", "1", "--short-prompt-len", "16",
         "--short-every-s", "0.25", "--stream-output-len", "32", "--duration-s", "2", "--vocab-size", "512",
         "--warmup", "1"]


def test_the_ablation_runs_both_servers_and_reports_their_ratios(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--ablate", "interference", "--model", "dummy:tiny", "--serve-args=--max-model-len 1024",
                              "--result-dir", str(tmp_path), *SMALL])
    assert run_bench_command(args) == 0
    (out,) = tmp_path.glob("interference-*")
    ablation = json.loads((out / "interference-ablation.json").read_text())
    assert [r["name"] for r in ablation["rows"]] == ["concurrent-lanes", "no-concurrent-lanes"]
    assert "| concurrent-lanes |" in (out / "interference-ablation.md").read_text()
    for row in ablation["rows"]:
        # <time>-<label>-c<concurrency>.json
        (run_file,) = [p for p in out.glob("*-c*.json") if p.stem.split("-", 1)[1].rsplit("-", 1)[0] == row["name"]]
        run = json.loads(run_file.read_text())
        samples = run["samples"]
        assert all(s["success"] for s in samples) and row["failed"] == 0
        assert {s["prompt_tokens"] for s in samples if s["kind"] == "short"} == {16}
        assert {s["prompt_tokens"] for s in samples if s["kind"] == "long"} == {600}
        assert sum(s["phase"] == "loaded" and s["kind"] == "long" for s in samples) == 2  # at 0.25 and 1.25 s
        idle = [s["ttft_s"] for s in samples if s["phase"] == "idle"]
        solo = [s["ttft_s"] for s in samples if s["phase"] == "solo"]
        loaded_longs = [s["ttft_s"] for s in samples if s["phase"] == "loaded" and s["kind"] == "long"]
        assert row["short_ttft_idle_p50_ms"] == pytest.approx(1000 * statistics.median(idle))
        assert row["long_over_solo"] == pytest.approx(statistics.median(loaded_longs) / statistics.median(solo))
        assert row["num_gaps_during"] > 0 and row["itl_p99_over_idle"] > 0
