"""The host path of a short prompt, stage by stage, from the server's own traces (CPU, `dummy:tiny`).

    python -m lab.host_path_stages [--root B] [--ab A] [-n 200] [--prompt-tokens 128] [--out FILE]

Starts `ttft serve --model dummy:tiny --device cpu` from each checkout given (`--root`, default this
one; `--ab` a second, e.g. /work/main, each served from its own tree), then sends streamed
completions of a `--prompt-tokens`-token prompt one at a time, alternating between the servers (in
a random order each round, with `--gap-ms` of quiet before each request, so that neither server's
work after a reply overlaps the other's next request) so that both see the same minutes of the
machine. The model's work is about nil here, so what a trace
holds is the host's: each request's edges (stages/trace.py) give the time from one edge to the next,
and three sums give the parts a GPU run shares with this one:

    a  body -> step start       received .. prefill_step_started (parse, tokenize, queue hops,
                                scheduling, the hand-off to the launch thread)
    b  step launch .. synced    prefill_step_started .. prefill_step_synced (on CPU: the forward too)
    c  synced -> first byte     prefill_step_synced .. first_token_written (result to the scheduler,
                                update, emit, the reader's wake, SSE framing, the socket write)

plus the client's TTFT (request sent to the first content chunk read). Prints medians (and P90) in
microseconds per server and, with two servers, the paired differences (each round's B minus A: the
median, and how often B was faster), which the machine's load moves less than either median;
writes every sample to `--out` as JSON when asked. `--summarize FILE` prints both again from it.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

EDGES = ("received", "parsed", "tokenized", "queued", "reserved", "first_scheduled", "prefill_step_started",
         "prefill_step_launched", "prefill_step_synced", "prefill_done", "first_token_sampled",
         "first_token_written")
PARTS = {"a_body_to_step_start": ("received", "prefill_step_started"),
         "b_step_start_to_synced": ("prefill_step_started", "prefill_step_synced"),
         "c_synced_to_first_byte": ("prefill_step_synced", "first_token_written")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path, log_dir: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(port), "--device", "cpu",
           "--model", "dummy:tiny", "--max-model-len", "1024", "--num-kv-blocks", "1024", *extra]
    log = open(log_dir / f"server-{port}.log", "wb")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server from {root} exited: see {log.name}")
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"server from {root} did not start")


def prompt_of(num_tokens: int) -> str:
    """Text the dummy tokenizer turns into `num_tokens` ids: BOS and one id per byte."""
    return ("abcdefghij" * num_tokens)[: num_tokens - 1]


def one_request(client: httpx.Client, url: str, rid: str, prompt: str, max_tokens: int) -> float:
    """Client TTFT in microseconds: sent to the first content chunk read."""
    body = {"model": "dummy:tiny", "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
    t0 = time.perf_counter_ns()
    first_us = None
    with client.stream("POST", f"{url}/v1/completions", json=body, headers={"X-Request-Id": rid}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first_us is None and line.startswith("data: {"):
                first_us = (time.perf_counter_ns() - t0) / 1e3
    return first_us


def spans_us(edges_ms: dict) -> dict[str, float]:
    out = {}
    marked = [e for e in EDGES if edges_ms.get(e) is not None]
    for prev, edge in zip(marked, marked[1:]):
        out[f"{prev}->{edge}"] = (edges_ms[edge] - edges_ms[prev]) * 1e3
    for name, (a, b) in PARTS.items():
        if edges_ms.get(a) is not None and edges_ms.get(b) is not None:
            out[name] = (edges_ms[b] - edges_ms[a]) * 1e3
    return out


def summary(samples: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    keys = [k for k in samples[0]]
    out = {}
    for k in keys:
        xs = sorted(s[k] for s in samples if k in s)
        out[k] = {"p50_us": round(statistics.median(xs), 1), "p90_us": round(xs[int(0.9 * (len(xs) - 1))], 1)}
    return out


def paired(report: dict) -> dict[str, dict[str, float]]:
    """Per span: the median of B - A over the rounds (us), and the share of rounds B was faster."""
    a, b = report["servers"]["A"]["samples"], report["servers"]["B"]["samples"]
    out = {}
    for key in b[0]:
        diffs = sorted(y[key] - x[key] for x, y in zip(a, b) if key in x and key in y)
        if diffs:
            out[key] = {"median_b_minus_a_us": round(statistics.median(diffs), 1),
                        "b_faster_share": round(sum(d < 0 for d in diffs) / len(diffs), 2)}
    return out


def print_report(report: dict) -> None:
    names = list(report["servers"])
    keys = list(report["servers"][names[0]]["summary"])
    print(f"{'span (us, p50 / p90)':48s}" + "".join(f"{n + ' ' + report['servers'][n]['commit']:>22s}" for n in names)
          + ("   B - A paired: median, B faster" if "paired" in report else ""))
    for k in keys:
        cells = "".join(f"{report['servers'][n]['summary'].get(k, {}).get('p50_us', float('nan')):>12.1f}"
                        f" / {report['servers'][n]['summary'].get(k, {}).get('p90_us', float('nan')):>7.1f}"
                        for n in names)
        if (pair := report.get("paired", {}).get(k)) is not None:
            cells += f"   {pair['median_b_minus_a_us']:+9.1f} {pair['b_faster_share']:>6.0%}"
        print(f"{k:48s}{cells}")


def commit_of(root: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    p.add_argument("--ab", default=None, help="a second checkout, served beside the first")
    p.add_argument("-n", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=2)
    p.add_argument("--gap-ms", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--log-dir", default="/tmp")
    # One OpenMP thread by default: the step's own time then does not follow what the CPU thread
    # policy reads of the other server's load (b is the model's part, not the host path's).
    p.add_argument("--server-args", default="--cpu-threads 1", help="extra `ttft serve` flags, one string")
    p.add_argument("--summarize", default=None, help="print the tables of an --out file and exit")
    a = p.parse_args()
    if a.summarize:
        print_report(json.loads(Path(a.summarize).read_text()))
        return
    roots = {"B": Path(a.root)} | ({"A": Path(a.ab)} if a.ab else {})
    servers = {name: start(root, Path(a.log_dir), a.server_args.split()) for name, root in roots.items()}
    prompt = prompt_of(a.prompt_tokens)
    client_us: dict[str, list[float]] = {name: [] for name in roots}
    rids: dict[str, list[str]] = {name: [] for name in roots}
    try:
        with httpx.Client(timeout=30) as client:
            rng = random.Random(a.seed)
            for i in range(a.warmup + a.n):
                order = list(servers.items())
                rng.shuffle(order)
                for name, (_, url) in order:
                    time.sleep(a.gap_ms / 1e3)
                    rid = f"hp-{name}-{i}"
                    us = one_request(client, url, rid, prompt, a.max_tokens)
                    if i >= a.warmup:
                        client_us[name].append(us)
                        rids[name].append(rid)
            report = {"server_args": a.server_args, "n": a.n, "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "gap_ms": a.gap_ms,
                      "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                                  "load_avg": os.getloadavg()},
                      "servers": {}}
            for name, (_, url) in servers.items():
                traces = client.get(f"{url}/debug/traces", params={"limit": 100_000}).json()["traces"]
                by_id = {t["request_id"]: t for t in traces}
                samples = []
                for rid, us in zip(rids[name], client_us[name]):
                    if rid in by_id:
                        spans = {**spans_us(by_id[rid]["edges_ms"]), "client_ttft": us}
                        samples.append({k: round(v, 1) for k, v in spans.items()})
                num_tokens = {by_id[r]["info"].get("num_prompt_tokens") for r in rids[name] if r in by_id}
                report["servers"][name] = {"root": str(roots[name]), "commit": commit_of(roots[name]),
                                           "num_traces": len(samples), "num_prompt_tokens": sorted(num_tokens),
                                           "summary": summary(samples), "samples": samples}
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(10)
    if "A" in report["servers"]:
        report["paired"] = paired(report)
    print_report(report)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
