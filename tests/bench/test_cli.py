"""`ttft bench` and `python -m bench`: one entry (bench.cli.run_bench_command) for both, its exit status."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.cli import DEFAULT_RESULT_DIR, add_bench_arguments
from pipeline.cli import main as ttft_main


def test_python_dash_m_bench(fake_server, tmp_path):
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "bench", "--base-url", fake_server.base_url, "--endpoint", "chat",
         "--workload", "shared-prefix", "--num-requests", "4", "--num-prefix-groups", "2", "--prefix-len", "8",
         "--input-len", "4", "--output-len", "3", "--warmup", "1", "--result-dir", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "4 ok, 0 failed" in out.stdout
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_ttft_bench_and_python_dash_m_bench_report_an_unreachable_server_alike(capsys):
    root = Path(__file__).resolve().parents[2]
    argv = ["--base-url", "http://127.0.0.1:9", "--num-requests", "1", "--input-len", "4", "--output-len", "2",
            "--warmup", "0", "--timeout", "5", "--no-save"]
    assert ttft_main(["bench", *argv]) == 2
    assert "ttft bench: error:" in capsys.readouterr().err
    out = subprocess.run([sys.executable, "-m", "bench", *argv], cwd=root, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "ttft bench: error:" in out.stderr


def test_failed_requests_give_exit_status_1(fake_server):
    argv = ["bench", "--base-url", fake_server.base_url, "--num-requests", "2", "--input-len", "4",
            "--output-len", "2", "--warmup", "0", "--extra-body", '{"fake_status": 400}', "--no-save"]
    assert ttft_main(argv) == 1


def test_vllm_style_flags_are_checked_before_any_request(fake_server, capsys):
    base = ["bench", "--base-url", fake_server.base_url, "--num-prompts", "1", "--warmup", "0", "--no-save"]
    num_before = len(fake_server.bodies())
    for flags, message in ((["--goodput", "ttft=5"], "expected KEY:MILLISECONDS"),
                           (["--goodput", "itl:5"], "one of ttft, tpot, e2el"),
                           (["--dataset-name", "sharegpt"], "needs --dataset-path"),
                           (["--dataset-path", "x.json"], "--dataset-path is for --dataset-name sharegpt"),
                           (["--dataset-name", "sharegpt", "--dataset-path", "/nonexistent.json"], "cannot read")):
        assert ttft_main(base + flags) == 2, flags
        assert message in capsys.readouterr().err, flags
    for flags in (["--percentile-metrics", "ttft,latency"], ["--metric-percentiles", "50,101"],
                  ["--dataset-name", "burstgpt"]):
        with pytest.raises(SystemExit) as e:  # argparse: usage and exit status 2
            ttft_main(base + flags)
        assert e.value.code == 2
    assert len(fake_server.bodies()) == num_before  # refused before any request went out


def test_results_go_to_the_working_directory_not_the_source_tree():
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    assert parser.parse_args([]).result_dir == "ttft-bench-results" == str(DEFAULT_RESULT_DIR)
    assert not DEFAULT_RESULT_DIR.is_absolute()
