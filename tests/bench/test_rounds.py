"""`ttft bench --rounds` on dummy:tiny: the transformers baselines, then ttft round by round, one table
whose figures and cuts come from the samples each round recorded."""
from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

import bench.rounds as rounds
from bench.cli import add_bench_arguments
from bench.rounds import MECHANISMS, ROUNDS, hf_shared_flags, ttft_flags
from bench.rounds_report import add_cuts, rounds_table
from pipeline.cli import main as ttft_main
from test_png_canvas import decode

SERVE = "--serve-args=--seed 0 --device cpu --max-model-len 512 --num-kv-blocks 256 --max-num-batched-tokens 512"
HF = "--hf-args=--cb-num-blocks 128 --cb-page-size 16 --cb-max-batch-tokens 512"
WORKLOAD = ["--reference-lengths", "16,32,64,128", "--output-len", "4", "--num-requests", "4", "--concurrency", "2",
            "--vocab-size", "512", "--warmup", "1"]
ROW_KEYS = {"round", "name", "what", "server", "flags", "mechanisms_on", "status", "note"}
OK_KEYS = {"ttft_p50_ms", "ttft_p95_ms", "itl_p50_ms", "output_tok_per_s", "completed", "failed", "startup_s",
           "duration_s", "bench_json", "ttft_p50_cut_vs_baseline", "ttft_p50_cut_vs_previous", "previous"}
ALL_OFF = [f for off, _ in MECHANISMS.values() for f in off]


def test_every_round_gets_a_row_and_its_cuts_come_from_the_samples(tmp_path, capsys):
    pytest.importorskip("transformers")
    code = ttft_main(["bench", "--rounds", "--model", "dummy:tiny", SERVE, HF, *WORKLOAD, "--result-dir", str(tmp_path)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    [out] = tmp_path.glob("rounds-*")
    result = json.loads((out / "rounds.json").read_text())
    assert set(result) == {"config", "machine", "rows", "chart"}
    assert result["config"]["reference_lengths"] == [16, 32, 64, 128] and result["config"]["num_requests"] == 4
    rows = result["rows"]
    assert [r["name"] for r in rows] == [r.name for r in ROUNDS]
    by = {r["name"]: r for r in rows}
    assert all(ROW_KEYS <= set(r) for r in rows)
    if not torch.cuda.is_available():
        assert by["r3-graphs"]["status"] == "n/a" and "GPU" in by["r3-graphs"]["note"]
    fp8 = by["r4-kv-fp8"]
    assert fp8["status"] == "ok" or (fp8["status"] == "not run" and "--kv-cache-dtype" in fp8["note"])
    ran = [r for r in rows if r["status"] == "ok"]
    assert {r["name"] for r in ran} >= {"generate", "continuous", "r1-paged", "r2-batching", "r5-ttft"}
    # the mechanisms go on round by round: r1 has every one off, r5 none (and fp8 only if r4 ran)
    assert all(f in by["r1-paged"]["flags"] for f in ALL_OFF) and by["r1-paged"]["mechanisms_on"] == []
    assert not any(f in by["r5-ttft"]["flags"] for f in ALL_OFF)
    assert ("--kv-cache-dtype" in by["r5-ttft"]["flags"]) == (fp8["status"] == "ok")
    assert by["generate"]["server"] == "generate" and "--seed" in by["generate"]["flags"]  # same weights
    previous = None
    for r in ran:
        assert OK_KEYS <= set(r), r["name"]
        samples = json.loads((out / r["bench_json"]).read_text())["samples"]
        assert len(samples) == 4 and all(s["success"] and s["output_tokens"] == 4 for s in samples), r["name"]
        assert sorted(s["prompt_len"] for s in samples) == [16, 32, 64, 128]
        ttfts = [1000.0 * s["ttft_s"] for s in samples]
        assert r["ttft_p50_ms"] == pytest.approx(float(np.median(ttfts)))
        assert r["ttft_p95_ms"] == pytest.approx(float(np.percentile(ttfts, 95)))
        assert r["ttft_p50_cut_vs_baseline"] == pytest.approx(1 - r["ttft_p50_ms"] / by["generate"]["ttft_p50_ms"])
        if previous is None:
            assert r["previous"] is None and r["ttft_p50_cut_vs_previous"] is None
        else:
            assert r["previous"] == previous["name"]
            assert r["ttft_p50_cut_vs_previous"] == pytest.approx(1 - r["ttft_p50_ms"] / previous["ttft_p50_ms"])
        previous = r
    md = (out / "rounds.md").read_text()
    assert md in printed and "| TTFT P50 vs generate |" in md
    assert all(f"| {r['name']} |" in md for r in rows)
    change = -100 * by["r5-ttft"]["ttft_p50_cut_vs_baseline"]
    assert f"| {change:+.1f}% |" in md
    assert result["chart"]["file"] == "rounds.png" and result["chart"]["drawn_by"] in ("builtin", "matplotlib")
    png = (out / "rounds.png").read_bytes()
    if result["chart"]["drawn_by"] == "builtin":
        width, height, _ = decode(png)
        assert width > 400 and height > 200
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"server-generate.log", "server-continuous.log", "server-r5-ttft.log"} <= {p.name for p in out.iterdir()}


def fake_args(tmp_path, *extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args(["--rounds", "--model", "dummy:tiny", "--result-dir", str(tmp_path), *extra])


def test_a_refused_round_is_not_run_and_its_mechanisms_stay_off(tmp_path, monkeypatch):
    """Which flags each round gets, without servers: r4's refusal drops fp8 from r5; r3 on a CPU is
    n/a but its mechanisms count as on (no-ops there); past the budget nothing starts."""
    seen = {}
    p50 = {"generate": 1000.0, "continuous": 400.0, "r1-paged": 200.0, "r2-batching": 100.0, "r5-ttft": 80.0}

    def fake_run(rnd, args, flags, out, deadline):
        seen[rnd.name] = flags
        if rnd.name == "r4-kv-fp8":
            return {"status": "not run", "note": "refused: unrecognized arguments: --kv-cache-dtype fp8"}
        return {"status": "ok", "note": "", "ttft_p50_ms": p50[rnd.name], "ttft_p95_ms": 1.0, "itl_p50_ms": 1.0,
                "output_tok_per_s": 1.0, "completed": 4, "failed": 0}

    monkeypatch.setattr(rounds, "run_round", fake_run)
    monkeypatch.setattr(rounds, "serves_on_gpu", lambda flags: False)
    assert rounds.run_rounds(fake_args(tmp_path, "--serve-args=--device cpu --seed 3")) == 0
    assert "--kv-cache-dtype" in seen["r4-kv-fp8"] and "--kv-cache-dtype" not in seen["r5-ttft"]
    assert "r3-graphs" not in seen and "--enforce-eager" not in seen["r4-kv-fp8"]
    assert seen["generate"] == ["--device", "cpu", "--seed", "3"]  # the weights' seed and device, not the engine's
    result = json.loads(next(tmp_path.glob("rounds-*/rounds.json")).read_text())
    by = {r["name"]: r for r in result["rows"]}
    assert by["r5-ttft"]["previous"] == "r2-batching"  # the last round that ran
    assert by["r5-ttft"]["ttft_p50_cut_vs_previous"] == pytest.approx(0.2)
    assert by["r5-ttft"]["ttft_p50_cut_vs_baseline"] == pytest.approx(0.92)
    assert "kv-fp8" not in by["r5-ttft"]["mechanisms_on"] and "cuda-graphs" in by["r5-ttft"]["mechanisms_on"]

    seen.clear()
    monkeypatch.setattr(rounds.time, "monotonic", iter(range(0, 10_000, 100)).__next__)
    rounds.run_rounds(fake_args(tmp_path, "--budget-s", "150"))
    result = json.loads(sorted(tmp_path.glob("rounds-*/rounds.json"))[-1].read_text())
    assert list(seen) == ["generate"]  # started at t=100 < 150; the next check reads t=200
    assert [r["status"] for r in result["rows"]][1:] == ["not run", "not run", "not run", "n/a", "not run", "not run"]


def test_flags_cuts_and_table():
    assert ttft_flags(set()) == ALL_OFF
    assert ttft_flags(set(MECHANISMS)) == ["--kv-cache-dtype", "fp8"]
    assert hf_shared_flags(["--device", "cuda", "--max-num-seqs", "8", "--seed", "1"]) == ["--device", "cuda",
                                                                                             "--seed", "1"]
    rows = [{"name": "generate", "status": "error", "note": "boom"},
            {"name": "a", "status": "ok", "ttft_p50_ms": 100.0},
            {"name": "b", "status": "n/a", "note": ""},
            {"name": "c", "status": "ok", "ttft_p50_ms": 25.0}]
    add_cuts(rows)
    assert rows[1]["ttft_p50_cut_vs_baseline"] is None and rows[1]["previous"] is None  # no baseline ran
    assert rows[3]["previous"] == "a" and rows[3]["ttft_p50_cut_vs_previous"] == pytest.approx(0.75)
    for r in rows:
        r.update(what="w", flags=["--x"], ttft_p95_ms=1.0, itl_p50_ms=1.0, output_tok_per_s=1.0, failed=0)
    cfg = {"model": None, "reference_lengths": [8], "output_len": 4, "num_requests": 2, "concurrency": 1}
    text = rounds_table({"config": cfg, "rows": rows})
    assert "| c | w | 25.0 | 1.0 | 1.00 | 1.0 |  | -75.0% |" in text and "| generate | w | error |" in text
    assert "the packaged model" in text and "- c: `--x`" in text
