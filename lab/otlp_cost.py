"""The host cost of OpenTelemetry export, measured two ways on CPU (issue 45).

1. In process: OtlpTraceExport to a live collector (bench/otlp_sink.py, another process) fed N
   finished traces shaped as a real request's (every edge marked, its info filled): the caller's cost
   of `submit` (what the event loop pays per request), and the CPU time of the export's threads
   (span building, batching, protobuf, HTTP) per request, against the same loop with export off.
2. A server A/B (bench/otlp_cost.py): `ttft serve` with and without --otlp-traces-endpoint, the
   server process's CPU per request and the client's TTFT and ITL.

    python lab/otlp_cost.py --out bench/results/<date>-cpu/otlp-cost [--traces 5000] [--skip-server]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.baselines.server_process import free_port  # noqa: E402
from bench.otlp_cost import sink_stats  # noqa: E402
from observe.otlp_export import OtlpTraceExport  # noqa: E402
from stages.trace import EDGES, RequestTrace  # noqa: E402


def realistic_trace(i: int) -> RequestTrace:
    """A finished request's trace: every edge 0.1-30 ms apart, the info a real one carries."""
    trace = RequestTrace(f"cmpl-{i:032x}")
    at = time.perf_counter_ns() - 100_000_000
    for k, edge in enumerate(EDGES):
        at += (100_000, 30_000_000)[k % 2]
        trace.mark(edge, at)
    trace.info.update(num_prompt_tokens=128, num_output_tokens=64, num_cached_tokens=0, lane="short",
                      num_preemptions=0, finish_reason="length", tokenize_wall_ms=0.05,
                      shadow={"num_requeues": 0, "footprint_blocks": 12})
    return trace


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return usage.ru_utime + usage.ru_stime


def in_process(num_traces: int, sink_url: str) -> dict:
    traces = [realistic_trace(i) for i in range(num_traces)]
    export = OtlpTraceExport(f"{sink_url}/v1/traces", {"gen_ai.request.model": "m", "ttft.kv_cache_dtype": "bf16"},
                             max_pending=num_traces + 1)
    cpu0, wall0 = cpu_s(), time.perf_counter()
    submit_ns = []
    for trace in traces:
        t0 = time.perf_counter_ns()
        export.submit(trace)
        submit_ns.append(time.perf_counter_ns() - t0)
    loop_cpu_s = cpu_s() - cpu0
    export.flush(120.0)
    cpu_total = cpu_s() - cpu0
    wall = time.perf_counter() - wall0
    export.close()
    submit_ns.sort()
    return {"num_traces": num_traces, "spans_per_trace": len(EDGES) - 1 + 2 + 1,
            "submit_p50_us": submit_ns[len(submit_ns) // 2] / 1e3, "submit_p99_us": submit_ns[int(len(submit_ns) * .99)] / 1e3,
            "submit_loop_cpu_us_per_trace": loop_cpu_s / num_traces * 1e6,
            "export_cpu_us_per_trace": cpu_total / num_traces * 1e6, "wall_s": wall,
            "exported": export.num_exported_traces, "dropped": export.num_dropped}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--traces", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-server", action="store_true")
    opts = p.parse_args()
    opts.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-m", "bench.otlp_sink", str(port)])
    try:
        time.sleep(1.0)
        runs = [in_process(opts.traces, f"http://127.0.0.1:{port}") for _ in range(opts.repeats)]
        stats = sink_stats(f"http://127.0.0.1:{port}")
    finally:
        sink.terminate()
        sink.wait(10)
    (opts.out / "in_process.json").write_text(json.dumps({"runs": runs, "sink": stats}, indent=1))
    print(json.dumps(runs, indent=1))
    if not opts.skip_server:
        return subprocess.call([sys.executable, "-m", "bench.otlp_cost", "--model", "dummy:tiny",
                                "--serve-args=--max-model-len 512 --device cpu", "--bench-args=--vocab-size 512",
                                "--rounds", "4", "--ttft-requests", "200", "--batch", "16", "--itl-waves", "8",
                                "--itl-output-len", "32", "--out", str(opts.out)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
