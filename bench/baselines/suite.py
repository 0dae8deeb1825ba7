"""The baseline comparison: each server in turn, same weights, same client, same workloads.

    python -m bench.baselines.suite --model dummy:llama-3-8b --out DIR [--modes generate,continuous,ttft]

Modes: `generate` and `continuous` are the transformers server (bench/baselines/hf_server.py) in
its two modes; `ttft` is `ttft serve` on the same (preset, seed), for the same numbers on our side
in the same run. Each server starts, answers three scenarios (TTFT at 2048 tokens, decode ITL at
batch 1, the reference workload at a reduced size), and stops before the next starts.

A one-request-at-a-time server takes about 10 s per reference request on the 8B shape (75 ms per
decode token x 128), so the default size is 16 requests, not the 48 of the ttft suite. Results go
to DIR/<mode>/ (JSON + Markdown per scenario) and DIR/baseline_summary.json/.md, rewritten after
every mode so a run cut short keeps what it measured.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import signal
import sys
import time
import urllib.request
from pathlib import Path

from bench.baselines.server_process import free_port, hf_server_command, start_server, ttft_serve_command
from bench.gpu_suite import bench_args
from bench.load import run_bench

MODES = ("generate", "continuous", "ttft")


def scenarios(num_reference: int, quick: bool) -> list[tuple[str, list[str]]]:
    """(label, `ttft bench` flags) of each scenario, the short ones first (they warm the server)."""
    return [
        ("ttft-2048", ["--input-len", "2048", "--output-len", "2", "--concurrency", "1",
                       "--num-requests", "2" if quick else "4", "--warmup", "1"]),
        ("decode-b1", ["--input-len", "128", "--output-len", "32" if quick else "128", "--concurrency", "1",
                       "--num-requests", "1" if quick else "2", "--warmup", "1"]),
        ("reference", ["--workload", "reference", "--output-len", "128", "--concurrency", "8",
                       "--num-requests", str(num_reference), "--warmup", "2"]),
    ]


def summarize(label: str, metrics: dict) -> dict:
    """The figures of one scenario worth a line in the summary."""
    key = {"ttft-2048": "ttft_2048", "decode-b1": "decode_b1", "reference": "ref"}[label]
    out = {f"{key}_ttft_p50_ms": metrics["median_ttft_ms"], f"{key}_itl_p50_ms": metrics["median_itl_ms"]}
    if label == "reference":
        out.update(ref_ttft_p95_ms=metrics["p95_ttft_ms"], ref_output_tok_per_s=metrics["output_throughput"],
                   ref_duration_s=metrics["duration_s"], ref_completed=metrics["completed"],
                   ref_failed=metrics["failed"])
    return out


def server_command(mode: str, args: argparse.Namespace, port: int) -> list[str]:
    common = ["--seed", str(args.seed), "--device", args.device, "--max-model-len", str(args.max_model_len)]
    if mode == "ttft":
        return ttft_serve_command(args.model, port, [*common, "--log-level", "warning",
                                                     *shlex.split(args.ttft_args)])
    return hf_server_command(args.model, mode, port, [*common, "--log-level", "warning",
                                                      *shlex.split(args.hf_args)])


async def run_mode(base_url: str, out: Path, args: argparse.Namespace, deadline: float) -> dict:
    summary: dict = {}
    wanted = args.scenarios.split(",") if args.scenarios else None
    for index, (label, flags) in enumerate(scenarios(args.num_requests, args.quick)):
        if wanted is not None and label not in wanted:
            continue
        left_s = deadline - time.monotonic()
        if left_s < 5:
            summary.setdefault("skipped", []).append(label)
            continue
        t0 = time.perf_counter()
        res = await run_bench(bench_args(base_url, out, label, *flags, "--timeout", f"{left_s:.0f}",
                                         # each scenario its own prompts, the same in every mode: with
                                         # one seed, ttft's prefix cache served a later scenario's
                                         # prompts from an earlier one's (same stream, same offsets)
                                         "--seed", str(args.seed + 1000 * (index + 1)),
                                         *shlex.split(args.bench_args)))
        summary.update(summarize(label, res["metrics"]))
        print(f"  {label}: ttft p50 {res['metrics']['median_ttft_ms']:.1f} ms in {time.perf_counter() - t0:.1f} s",
              flush=True)
    return summary


def write_summary(out: Path, summary: dict) -> None:
    (out / "baseline_summary.json").write_text(json.dumps(summary, indent=2))
    keys = sorted({k for row in summary["modes"].values() for k in row if k not in ("error", "skipped")})
    modes = list(summary["modes"])
    lines = [f"baselines: {summary['model']} seed {summary['seed']}", "",
             "| figure | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for k in keys:
        cells = [summary["modes"][m].get(k) for m in modes]
        lines.append(f"| {k} | " + " | ".join("" if c is None else f"{c:.2f}" if isinstance(c, float)
                                             else str(c).replace("|", "\\|") for c in cells) + " |")
    for m in modes:
        if err := summary["modes"][m].get("error"):
            lines.append(f"\n{m}: error: {err.splitlines()[0] if err else ''}")
    (out / "baseline_summary.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.baselines.suite", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="dummy:llama-3-8b")
    p.add_argument("--seed", type=int, default=0, help="dummy weights and workload seed")
    p.add_argument("--out", required=True)
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {MODES}")
    p.add_argument("--device", default="auto")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--num-requests", type=int, default=16, help="reference workload size")
    p.add_argument("--quick", action="store_true", help="fewer requests in the short scenarios")
    p.add_argument("--budget-s", type=float, default=450.0, help="stop starting scenarios past this")
    p.add_argument("--ready-timeout-s", type=float, default=300.0)
    p.add_argument("--scenarios", default=None, help="comma-separated subset of ttft-2048,decode-b1,reference")
    p.add_argument("--bench-args", default="", help="flags appended to every scenario (they win), e.g. for "
                                                    "a CPU smoke run: '--input-len 32 --vocab-size 512'")
    p.add_argument("--hf-args", default="", help="extra flags for the transformers server")
    p.add_argument("--ttft-args", default="", help="extra flags for ttft serve")
    args = p.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if bad := [m for m in modes if m not in MODES]:
        p.error(f"unknown modes {bad}; choose from {MODES}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` stops us: servers stop too (finally)
    deadline = time.monotonic() + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"model": args.model, "seed": args.seed, "device": args.device, "modes": {}}
    for mode in modes:
        print(f"== baseline {mode}", flush=True)
        port = free_port()
        row: dict = {}
        try:
            server = start_server(server_command(mode, args, port), port, out / f"server-{mode}.log",
                                  min(args.ready_timeout_s, max(5.0, deadline - time.monotonic())))
            row["startup_s"] = server.started_s
            with urllib.request.urlopen(server.base_url + "/health", timeout=10) as resp:
                health = json.loads(resp.read() or b"{}")
            if isinstance(health, dict) and health.get("attention"):
                row["attention"] = health["attention"]  # what the transformers server really ran
            with server:
                row.update(asyncio.run(run_mode(server.base_url, out / mode, args, deadline)))
        except (RuntimeError, OSError, ValueError) as exc:
            row["error"] = str(exc)
            print(f"  {mode}: error: {exc}", flush=True)
        summary["modes"][mode] = row
        write_summary(out, summary)
    print((out / "baseline_summary.md").read_text())
    return 0 if all("error" not in r for r in summary["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
