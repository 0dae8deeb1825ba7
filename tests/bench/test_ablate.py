"""`ttft bench --ablate` on dummy:tiny: one real server per configuration, one table."""
from __future__ import annotations

import argparse
import json

import pytest

from bench.ablate import ABLATIONS, Ablation, add_deltas, run_one, selected, serves_on_gpu, table
from bench.cli import add_bench_arguments
from pipeline.cli import main as ttft_main

SERVE = "--serve-args=--device cpu --max-model-len 256 --num-kv-blocks 256 --max-num-batched-tokens 256"
WORKLOAD = ["--input-len", "32", "--output-len", "8", "--num-requests", "6", "--concurrency", "3",
            "--vocab-size", "512", "--warmup", "1"]


def test_every_configuration_gets_a_row(tmp_path, capsys):
    code = ttft_main(["bench", "--ablate", "random", "--model", "dummy:tiny", SERVE, *WORKLOAD,
                      "--result-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    [out_dir] = tmp_path.glob("ablation-*")
    result = json.loads((out_dir / "ablation.json").read_text())
    rows = {r["name"]: r for r in result["rows"]}
    assert list(rows) == [a.name for a in ABLATIONS]
    assert rows["no-cuda-graphs"]["status"] == "n/a"  # CPU: there are no graphs to switch off
    ran = [r for r in rows.values() if r["status"] == "ok"]
    assert len(ran) == len(ABLATIONS) - 1
    for r in ran:
        assert (r["completed"], r["failed"]) == (6, 0) and r["ttft_p50_ms"] > 0 and r["itl_p50_ms"] > 0
    assert rows["full"]["ttft_p50_delta_pct"] == 0.0
    assert rows["fcfs"]["flags"] == ["--scheduler-policy", "fcfs"]
    md = (out_dir / "ablation.md").read_text()
    assert md in printed and all(f"| {name} |" in md for name in rows)
    assert len(list(out_dir.glob("*-ablate-*-c3.json"))) == len(ran)  # every run's samples kept
    assert "server-no-chunked-prefill.log" in {p.name for p in out_dir.iterdir()}


def test_a_server_that_cannot_start_is_an_error_row(tmp_path):
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    args = parser.parse_args(["--model", "dummy:tiny", "--ablate", "random", *WORKLOAD])
    # without chunking the step budget must hold max_model_len: refused at start-up, with the reason
    flags = ["--device", "cpu", "--max-model-len", "256", "--max-num-batched-tokens", "128", "--log-level", "warning"]
    row = run_one(Ablation("no-chunked-prefill", ("--no-enable-chunked-prefill",), "x"), args, flags, tmp_path)
    assert row["status"] == "error"
    assert "max_num_batched_tokens (128) must be >= max_model_len (256)" in row["note"]


def test_selection_deltas_and_device():
    assert [a.name for a in selected("fcfs")] == ["full", "fcfs"]
    with pytest.raises(ValueError, match="unknown ablations"):
        selected("no-such")
    assert serves_on_gpu(["--device", "cuda"]) and not serves_on_gpu(["--device", "cpu"])
    rows = [{"name": "full", "status": "ok", "ttft_p50_ms": 200.0},
            {"name": "fcfs", "status": "ok", "ttft_p50_ms": 250.0},
            {"name": "no-shadow", "status": "error", "note": "boom\nmore"}]
    add_deltas(rows)
    assert rows[1]["ttft_p50_delta_pct"] == pytest.approx(25.0) and "ttft_p50_delta_pct" not in rows[2]
    for r in rows[:2]:
        r.update(ttft_p95_ms=1.0, itl_p50_ms=1.0, output_tok_per_s=1.0, failed=0)
    cfg = {"model": "m", "workload": "reference", "num_requests": 4, "concurrency": 8}
    text = table({"config": cfg, "rows": rows})
    assert "| fcfs | 250.0 |" in text and "+25.0%" in text and "| no-shadow | error | | | | boom |" in text
