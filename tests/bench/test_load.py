"""bench.load: one run end to end against the fake server: table printed, JSON with every sample written."""
from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from bench.cli import add_bench_arguments
from bench.load import run_bench

TTFT_S, ITL_S = 0.040, 0.010


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize("mode", [["--concurrency", "3"], ["--rate", "100", "--max-concurrency", "4"]])
def test_run_bench_end_to_end(fake_server, tmp_path, capsys, mode):
    extra = json.dumps({"fake_ttft_s": TTFT_S, "fake_itl_s": ITL_S})
    args = parse(["--base-url", fake_server.base_url, "--workload", "mixed", "--num-requests", "8",
                  "--input-len", "16", "--long-len", "64", "--output-len", "5", "--warmup", "2",
                  "--extra-body", extra, "--result-dir", str(tmp_path), "--label", "fake", *mode])
    num_bodies = len(fake_server.bodies())
    result = asyncio.run(run_bench(args))

    m = result["metrics"]
    assert m["completed"] == 8 and m["failed"] == 0
    assert TTFT_S * 1000 <= m["p50_ttft_ms"] < (TTFT_S + 0.200) * 1000  # exact checks: test_client.py
    assert abs(m["median_itl_ms"] - ITL_S * 1000) < 8
    assert m["total_output_tokens"] == 40 and m["total_input_tokens"] == 6 * 16 + 2 * 64
    assert m["p50_tpot_ms"] == pytest.approx(ITL_S * 1000, abs=8)

    bodies = fake_server.bodies()[num_bodies:]
    assert len(bodies) == 10  # 2 warm-up + 8 measured
    assert all(b["model"] == "fake-model" and b["ignore_eos"] and b["stream"] for b in bodies)
    assert [b["max_tokens"] for b in bodies[:2]] == [5, 5]

    saved = json.loads(Path(result["paths"]["json"]).read_text())
    assert len(saved["samples"]) == 8
    assert {s["request_id"] for s in saved["samples"]} == {f"mixed-{i}" for i in range(8)}
    assert all(len(s["chunk_times_s"]) == 5 for s in saved["samples"])
    assert saved["machine"]["cpu_count"] and saved["machine"]["python"]
    assert "git_commit" in saved["machine"] and "api_key" not in saved["config"]
    assert saved["config"]["mode"] == ("open" if "--rate" in mode else "closed")
    table = Path(result["paths"]["markdown"]).read_text()
    assert "| TTFT |" in table and table in capsys.readouterr().out


def test_failed_warmup_stops_the_run(fake_server, tmp_path):
    args = parse(["--base-url", fake_server.base_url, "--num-requests", "2", "--input-len", "4",
                  "--output-len", "2", "--extra-body", '{"fake_status": 400}', "--no-save"])
    with pytest.raises(RuntimeError, match="warm-up requests failed.*fake failure"):
        asyncio.run(run_bench(args))


def test_warmup_replies_are_as_long_as_the_bodys_min_tokens(fake_server, tmp_path):
    args = parse(["--base-url", fake_server.base_url, "--num-requests", "1", "--input-len", "4",
                  "--output-len", "40", "--warmup", "1", "--no-save"])
    for extra, warm_max_tokens in ((None, 16), ('{"min_tokens": 30}', 30)):
        args.extra_body = extra
        num_bodies = len(fake_server.bodies())
        asyncio.run(run_bench(args))
        assert [b["max_tokens"] for b in fake_server.bodies()[num_bodies:]] == [warm_max_tokens, 40]
