"""Do prefills that join running decodes stall them? vLLM's own client (`vllm bench serve`, random 256
in / 32 out, 4 in flight, 24 prompts) against `ttft serve` on CPU, one server per config, with every
step logged (lab/cpu_step_log.py):

    python -m lab.cpu_stall_probe --out DIR [--repeats 2] -- "FLAGS A" "FLAGS B" ...

Each config is a string of extra `ttft serve` flags ("" for the defaults); the configs run
interleaved (A, B, A, B, ...) so that they share the machine's load. Prints and writes DIR/probe.json:
TTFT P50/P95, ITL P50/P95/P99, TPOT P50, output tokens/s per run, and the step log's split (decode-only
steps against steps with prefill chunks, chunk sizes); DIR/cX-rY.json keeps the client's per-request
gaps (`itls`). The CLI sets the OpenMP environment before torch loads; the step log imports torch first,
so the probe sets it (OMP_WAIT_POLICY=PASSIVE, GOMP_SPINCOUNT=20000) in the server's environment.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.baselines.server_process import free_port
from bench.vllm_bench_client import run as run_vllm_bench
from lab.cpu_step_log import summary

MODEL_DIR = Path("/work/smollm2-hf")
VLLM_PYTHON = "/work/vllm-venv/bin/python"
SERVED = "smollm2"
BASE_FLAGS = ["--served-model-name", SERVED, "--dtype", "float32", "--device", "cpu", "--max-model-len", "2048",
              "--kv-cache-gb", "1", "--log-level", "warning"]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1.0)
    raise RuntimeError("server not ready")


def run_one(flags: str, out: Path, label: str, seed: int) -> dict:
    port = free_port()
    steps = out / f"{label}.steps.jsonl"
    steps.unlink(missing_ok=True)
    # The CLI sets these before torch loads; the step log imports torch first, so set them here.
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "20000"}
    cmd = [sys.executable, "-m", "lab.cpu_step_log", str(steps), "--", "--model", str(MODEL_DIR),
           "--port", str(port), *BASE_FLAGS, *flags.split()]
    log = open(out / f"{label}.server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_ready(port, proc)
        load = os.getloadavg()[0]
        steps.write_text("")  # the warm-up steps of start-up are not the workload's
        result = run_vllm_bench(VLLM_PYTHON, f"http://127.0.0.1:{port}", SERVED, MODEL_DIR, out, label, seed,
                                runner=with_p99)
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
    m = result["metrics"]
    saved = json.loads((out / f"{label}.json").read_text())
    m["p99_itl_ms"], m["max_tpot_ms"] = saved.get("p99_itl_ms", -1.0), max(saved.get("tpots") or [-1.0])
    return {"label": label, "flags": flags, "load_before": round(load, 2),
            **{k: round(v, 1) for k, v in m.items()}, "steps": summary(str(steps))}


def with_p99(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """vLLM's client as bench/vllm_bench_client.py runs it, its percentiles with the 99th too and
    every request's detail kept: a stall concentrated into fewer steps moves P99, not P95."""
    cmd = [("50,95,99" if c == "50,95" else c) for c in cmd] + ["--save-detailed"]
    return subprocess.run(cmd, **kw)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("configs", nargs="+")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in range(a.repeats):
        for i, flags in enumerate(a.configs):
            row = run_one(flags, out, f"c{i}-r{r}", a.seed + r)
            rows.append(row)
            s = row["steps"]
            print(f"[{flags or 'defaults'}] r{r} load {row['load_before']}: TTFT P50/P95 {row['median_ttft_ms']}/"
                  f"{row['p95_ttft_ms']}  ITL P50/P95/P99 {row['median_itl_ms']}/{row['p95_itl_ms']}/{row['p99_itl_ms']}  TPOT "
                  f"{row['median_tpot_ms']}  tok/s {row['output_throughput']}  | decode-only {s['decode_only']} "
                  f"with-prefill {s['with_prefill']} chunks {s['chunk_sizes']}", flush=True)
            (out / "probe.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
