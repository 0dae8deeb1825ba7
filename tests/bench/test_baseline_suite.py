"""The baseline suite on dummy:tiny (CPU smoke run): each server in turn, the same scenarios, one summary."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from bench.baselines.suite import main, scenarios, summarize, write_summary  # noqa: E402

CPU_RUN = ["--model", "dummy:tiny", "--device", "cpu", "--max-model-len", "1024", "--quick",
           "--scenarios", "ttft-2048,decode-b1", "--bench-args", "--input-len 32 --output-len 4 --vocab-size 512",
           "--hf-args", "--cb-num-blocks 128 --cb-page-size 16 --cb-max-batch-tokens 512",
           "--ttft-args", "--num-kv-blocks 1024"]


def test_every_mode_answers_the_same_scenarios(tmp_path, capsys):
    assert main([*CPU_RUN, "--out", str(tmp_path)]) == 0, capsys.readouterr().out
    summary = json.loads((tmp_path / "baseline_summary.json").read_text())
    assert list(summary["modes"]) == ["generate", "continuous", "ttft"]
    for mode, row in summary["modes"].items():
        assert "error" not in row, row
        # ITL may be 0: dummy:tiny's 4 tokens can come faster than a server's loop turns, in one chunk.
        assert row["ttft_2048_ttft_p50_ms"] > 0 and row["decode_b1_itl_p50_ms"] >= 0 and row["startup_s"] > 0
        assert len(list((tmp_path / mode).glob("*.json"))) == 2  # each scenario's samples kept
        for path in (tmp_path / mode).glob("*.json"):  # every request answered with all its tokens
            samples = json.loads(path.read_text())["samples"]
            assert samples and all(s["success"] and s["output_tokens"] == 4 for s in samples), path
    md = (tmp_path / "baseline_summary.md").read_text()
    assert "| figure | generate | continuous | ttft |" in md and "| decode_b1_itl_p50_ms |" in md


def test_a_mode_that_cannot_start_is_recorded_and_the_rest_run(tmp_path):
    code = main([*CPU_RUN, "--out", str(tmp_path), "--modes", "generate",
                 "--hf-args", "--attn-implementation no-such-attention"])
    assert code == 1
    row = json.loads((tmp_path / "baseline_summary.json").read_text())["modes"]["generate"]
    assert "server exited" in row["error"]


def test_scenarios_and_summary_shape(tmp_path):
    labels = [label for label, _ in scenarios(16, quick=False)]
    assert labels == ["ttft-2048", "decode-b1", "reference"]
    ref_flags = dict(scenarios(16, quick=False))["reference"]
    assert ref_flags[ref_flags.index("--num-requests") + 1] == "16" and "reference" in ref_flags
    m = {"median_ttft_ms": 30000.0, "median_itl_ms": 75.0, "p95_ttft_ms": 60000.0, "output_throughput": 13.0,
         "duration_s": 160.0, "completed": 16, "failed": 0}
    row = summarize("reference", m)
    assert row["ref_ttft_p50_ms"] == 30000.0 and row["ref_ttft_p95_ms"] == 60000.0 and row["ref_completed"] == 16
    write_summary(tmp_path, {"model": "m", "seed": 0, "modes": {"generate": row, "continuous": {"error": "boom"}}})
    md = (tmp_path / "baseline_summary.md").read_text()
    assert "| ref_ttft_p50_ms | 30000.00 |  |" in md and "continuous: error: boom" in md
