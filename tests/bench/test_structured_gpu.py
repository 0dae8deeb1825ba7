"""bench/structured_gpu.py and bench/structured_masks.py on CPU: their argument handling, the
report table, a whole (tiny) run of each (the first against `ttft serve --model dummy:tiny`), and
device_run.sh's --structured mode wired to them (the GPU run itself is the lead's)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import structured_gpu, structured_masks
from live_server import start_server

ROOT = Path(__file__).resolve().parents[2]


def test_arguments_default_to_the_issues_measurements():
    args = structured_gpu.parse_args(["--out", "x"])
    assert (args.lengths, args.batches, args.rounds) == ([128, 2048], [1, 64], 10)
    assert structured_gpu.parse_args(["--out", "x", "--lengths", "16,32"]).lengths == [16, 32]


@pytest.mark.parametrize("argv", [["--lengths", "a,b"], ["--lengths", "0"], ["--batches", ""], ["--rounds", "0"],
                                  ["--output-len", "1"], []])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        structured_gpu.parse_args(argv if not argv or argv[0] == "--out" else ["--out", "x", *argv])
    assert info.value.code == 2


def test_the_table_shows_tpot_and_chunks_per_token_and_a_dash_without_tpot():
    itl = {"batch": 4, "output_len": 8, "plain_itl_ms": 5.0, "constrained_itl_ms": 7.5, "ratio": 1.5,
           "plain_tpot_ms": 5.0, "constrained_tpot_ms": 5.5, "tpot_ratio": 1.1, "plain_chunks_per_token": 1.0,
           "constrained_chunks_per_token": 0.73}
    table = structured_gpu.markdown({"ttft": [], "itl": [itl, {**itl, "tpot_ratio": None}]})
    assert "| 4 | 5.00 | 7.50 | 1.500 | 5.00 | 5.50 | 1.100 | 1.00 / 0.73 |" in table
    assert "| 4 | 5.00 | 7.50 | 1.500 | - | - | - | 1.00 / 0.73 |" in table


def test_a_new_schema_is_new_every_time():
    a, b = structured_gpu.fresh_schema(), structured_gpu.fresh_schema()
    assert a != b and a != structured_gpu.WARM_SCHEMA


def test_a_tiny_run_against_a_server_writes_its_ratios(tmp_path):
    server = start_server(tmp_path, "--model", "dummy:tiny", "--max-model-len", "256")
    try:
        rc = structured_gpu.main(["--base-url", server.base_url, "--out", str(tmp_path), "--lengths", "16",
                                  "--batches", "2", "--rounds", "2", "--output-len", "4", "--vocab-size", "512"])
    finally:
        server.stop()
    assert rc == 0
    result = json.loads((tmp_path / "structured_gpu.json").read_text())
    assert result["ttft"][0]["prompt_tokens"] == 16 and result["ttft"][0]["ratio_new"] > 0
    itl = result["itl"][0]
    assert itl["batch"] == 2 and itl["ratio"] > 0 and itl["tpot_ratio"] > 0
    assert 0 < itl["plain_chunks_per_token"] <= 1 and 0 < itl["constrained_chunks_per_token"] <= 1
    assert "| 16 |" in (tmp_path / "structured_gpu.md").read_text()


def test_the_masks_probe_runs_and_reports_both_fills(tmp_path, capsys):
    assert structured_masks.main(["--vocab-size", "512", "--batch", "4", "--steps", "4", "--rounds", "2", "--threads",
                                  "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "structured_masks.json").read_text())
    assert result["batch"] == 4 and result["sequential"]["median_ms"] > 0 and result["executor"]["median_ms"] > 0
    assert [list(r) for r in result["round_medians_ms"]] == [["sequential", "executor"], ["executor", "sequential"]]


@pytest.mark.parametrize("argv", [["--batch", "0"], ["--rounds", "0"], ["--threads", "0"]])
def test_the_masks_probe_refuses_bad_sizes(argv):
    with pytest.raises(SystemExit) as info:
        structured_masks.main(argv)
    assert info.value.code == 2


def test_device_run_has_a_structured_mode():
    script = (ROOT / "bench" / "device_run.sh").read_text()
    assert "--structured) STRUCTURED=1" in script
    assert "python3 -m bench.structured_gpu" in script and "python3 -m bench.structured_masks" in script
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "device_run.sh")]).returncode == 0
