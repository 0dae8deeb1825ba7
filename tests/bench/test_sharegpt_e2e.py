"""`ttft bench --dataset-name sharegpt` with vLLM's --goodput, --percentile-metrics and
--metric-percentiles, against a real `ttft serve --model dummy:tiny`, on the shipped ShareGPT sample.
The dummy model's byte tokenizer is the one `--tokenizer dummy` counts with, so the lengths the
bench samples are the lengths the server sees."""
from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from bench.baselines.server_process import ServerProcess, free_port, start_server, ttft_serve_command
from bench.cli import add_bench_arguments
from bench.load import run_bench
from bench.sharegpt import is_valid_sequence, load_conversations

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "data" / "sharegpt_sample.json"
SHAREGPT = ["--dataset-name", "sharegpt", "--dataset-path", str(SAMPLE), "--tokenizer", "dummy",
            "--warmup", "1", "--input-len", "16", "--vocab-size", "512", "--no-save"]


def byte_len(text: str) -> int:
    return len(text.encode()) + 1


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("sharegpt") / "serve.log"
    proc: ServerProcess = start_server(ttft_serve_command("dummy:tiny", port, []), port, log, ready_timeout_s=60)
    yield proc.base_url
    proc.stop(grace_s=20)


def bench(url: str, *flags: str) -> dict:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return asyncio.run(run_bench(parser.parse_args(["--base-url", url, *SHAREGPT, *flags])))


def test_every_usable_conversation_once_with_goodput_and_the_chosen_percentiles(server, capsys):
    result = bench(server, "--num-prompts", "500", "--no-oversample", "--sharegpt-output-len", "4",
                   "--concurrency", "8", "--goodput", "ttft:40", "tpot:30",
                   "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "25,50,99")
    m, samples = result["metrics"], result["samples"]
    # 61 conversations of two turns or more; with the output length given, only the prompt's
    # bounds count: "Ok" (3 tokens) and the 1,468-token prompt are left out.
    convs = load_conversations(SAMPLE, seed=0)
    usable = [c for c in convs if is_valid_sequence(byte_len(c[0]["value"]), 4, skip_min_output_len_check=True)]
    assert len(usable) == 59
    assert (m["completed"], m["failed"], len(samples)) == (59, 0, 59)
    assert all(s["output_tokens"] == 4 and s["prompt_tokens"] == s["prompt_len"] for s in samples)
    assert sorted(s["prompt_len"] for s in samples) == sorted(byte_len(c[0]["value"]) for c in usable)
    assert m["total_input_tokens"] == sum(byte_len(c[0]["value"]) for c in usable)
    # vLLM's percentile keys, for the chosen metrics only.
    for name in ("ttft", "tpot", "e2el"):
        assert all(f"p{p}_{name}_ms" in m for p in (25, 50, 99))
        assert m[f"p25_{name}_ms"] <= m[f"p50_{name}_ms"] <= m[f"p99_{name}_ms"]
    assert not any(k.startswith("p") and k.endswith("_itl_ms") for k in m) and "p95_ttft_ms" not in m
    # Goodput: the requests meeting both SLOs, recounted from the samples.
    good = [s for s in samples if s["ttft_s"] <= 0.040 and (s["latency_s"] - s["ttft_s"]) / 3 <= 0.030]
    assert m["num_good_requests"] == len(good)
    assert 0.0 <= m["goodput_fraction"] <= 1.0 and m["goodput_fraction"] == len(good) / 59
    assert m["request_goodput"] == pytest.approx(len(good) / m["duration_s"])
    assert m["request_goodput"] <= m["request_throughput"]
    table = capsys.readouterr().out
    assert "| metric (ms) | mean | P25 | P50 | P99 |" in table and "| ITL |" not in table
    assert f"goodput (ttft <= 40 ms, tpot <= 30 ms): {m['request_goodput']:.2f} req/s, {len(good)} requests" in table
    assert result["config"]["dataset_name"] == "sharegpt" and result["config"]["workload"] == "sharegpt"


def test_replies_are_as_long_as_the_datasets_and_a_short_file_is_drawn_again(server):
    result = bench(server, "--num-prompts", "6", "--concurrency", "6", "--seed", "0")
    samples = result["samples"]
    convs = load_conversations(SAMPLE, seed=0)
    usable = [c for c in convs if is_valid_sequence(byte_len(c[0]["value"]), byte_len(c[1]["value"]))][:6]
    expected = {byte_len(c[0]["value"]): byte_len(c[1]["value"]) for c in usable}
    assert result["metrics"]["completed"] == 6
    assert {s["prompt_len"]: s["output_tokens"] for s in samples} == expected  # ignore_eos: exact lengths
    assert result["metrics"]["total_output_tokens"] == sum(expected.values())
