"""bench.vllm_bench_client: the command it runs (the issue's workload, through vLLM's own parser),
the result it reads back, and every way the client can fail (a RuntimeError naming why)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.vllm_bench_client import BOOTSTRAP, KEYS, NUM_PROMPTS, command, metrics_of, run

RESULT = {"median_ttft_ms": 800.0, "p95_ttft_ms": 1100.0, "mean_ttft_ms": 850.0, "median_tpot_ms": 40.0,
          "median_itl_ms": 38.0, "p95_itl_ms": 60.0, "mean_itl_ms": 41.0, "output_throughput": 50.0,
          "completed": 24, "failed": 0}


def _value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_the_command_is_the_issue_s_workload(tmp_path: Path) -> None:
    cmd = command("/v/bin/python", "http://127.0.0.1:9", "smollm2", tmp_path / "m", tmp_path / "r", "x.json", 7)
    assert cmd[:3] == ["/v/bin/python", "-c", BOOTSTRAP] and "vllm.benchmarks.serve" in BOOTSTRAP
    assert (_value(cmd, "--random-input-len"), _value(cmd, "--random-output-len")) == ("256", "32")
    assert (_value(cmd, "--num-prompts"), _value(cmd, "--max-concurrency")) == ("24", "4")
    assert _value(cmd, "--base-url") == "http://127.0.0.1:9" and _value(cmd, "--tokenizer") == str(tmp_path / "m")
    assert _value(cmd, "--endpoint") == "/v1/completions" and "--ignore-eos" in cmd and "--save-result" in cmd
    assert _value(cmd, "--metric-percentiles") == "50,95" and _value(cmd, "--result-filename") == "x.json"


def _runner(write: dict | str | None, returncode: int = 0, output: str = "done"):
    calls = []

    def fake(cmd, **kw) -> subprocess.CompletedProcess:
        calls.append((cmd, kw))
        if write is not None:
            path = Path(_value(cmd, "--result-dir")) / _value(cmd, "--result-filename")
            path.write_text(write if isinstance(write, str) else json.dumps(write))
        return subprocess.CompletedProcess(cmd, returncode, output, "warn\n")
    return fake, calls


def test_a_run_reads_its_result_back_as_run_bench_s_metrics(tmp_path: Path) -> None:
    fake, calls = _runner(RESULT)
    out = run("/v/bin/python", "http://h:1", "smollm2", tmp_path / "m", tmp_path / "runs", "ttft-r0-vllm-bench", 404,
              runner=fake)
    assert out["metrics"] == {k: RESULT[k] for k in KEYS} | {"failed": 0} and out["client"] == "vllm bench serve"
    assert calls[0][1]["timeout"] > 0 and (tmp_path / "runs" / "ttft-r0-vllm-bench.log").read_text() == "done" + "warn\n"


def test_failed_prompts_are_counted_when_the_result_omits_them() -> None:
    result = {k: v for k, v in RESULT.items() if k != "failed"} | {"completed": 20}
    assert metrics_of(result)["failed"] == NUM_PROMPTS - 20


@pytest.mark.parametrize("write,returncode,match", [
    (None, 1, "exited 1: done"),  # the client failed: its last lines say why
    (None, 0, "exited 0"),  # it exited cleanly but wrote no result
    ("{not json", 0, "not JSON"),
    ({"completed": 3}, 0, "lacks median_ttft_ms"),
])
def test_a_failing_client_is_a_runtime_error(tmp_path: Path, write, returncode: int, match: str) -> None:
    fake, _ = _runner(write, returncode)
    with pytest.raises(RuntimeError, match=match):
        run("/v/bin/python", "http://h:1", "m", tmp_path, tmp_path / "runs", "l", 1, runner=fake)


@pytest.mark.parametrize("exc", [FileNotFoundError("no python"), subprocess.TimeoutExpired("python", 1.0)])
def test_a_client_that_cannot_run_is_a_runtime_error(tmp_path: Path, exc: Exception) -> None:
    def fake(cmd, **kw):
        raise exc

    with pytest.raises(RuntimeError, match="did not run"):
        run("/absent/python", "http://h:1", "m", tmp_path, tmp_path / "runs", "l", 1, runner=fake)


def test_a_stale_result_is_not_read_again(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "l.json").write_text(json.dumps(RESULT))  # a previous run's
    fake, _ = _runner(None)
    with pytest.raises(RuntimeError, match="exited 0"):
        run("/v/bin/python", "http://h:1", "m", tmp_path, tmp_path / "runs", "l", 1, runner=fake)
