"""`ttft bench --workload interference`: its arguments, and one run against a server from arguments
to files (the workload: bench/interference.py; the figures: bench/interference_report.py)."""
from __future__ import annotations

import argparse
import time


from bench.client import BenchClient
from bench.extra_body import extra_body
from bench.interference import PRESETS, Phases, Requests, preset, run_interference
from bench.interference_report import interference_figures, interference_table
from bench.report import machine_info, write_report

HELP = """\
N streams decode without pause, a long prompt arrives every T s and a short request every t s, for
--duration-s; first, with nothing else running, the idle baselines (a short request's TTFT, the
streams' inter-token gap, a long prompt's solo TTFT). Reports short TTFT P50/P95 during the long
prefills over idle P50, the streams' ITL P99 during them over idle P50, long TTFT over solo.
--preset h100: 8 streams, a 32K prompt every 3 s, a 128-token request every 250 ms; --preset cpu:
SmolLM2-sized (3,000-token long prompts, short chat prompts; use --endpoint chat). The flags below
replace the preset's values. `--ablate interference` runs it against a server with concurrent lanes
and one with --no-concurrent-lanes."""


def add_interference_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("interference workload", HELP)
    a = g.add_argument
    a("--preset", choices=sorted(PRESETS), default="h100", help="interference: the sizes to start from")
    a("--streams", type=int, default=None, help="interference: streams decoding (N)")
    a("--long-prompt-len", type=int, default=None, help="interference: tokens of each long prompt")
    a("--long-every-s", type=float, default=None, help="interference: a long prompt every T seconds")
    a("--short-prompt-len", type=int, default=None, help="interference: tokens of each short request")
    a("--short-every-s", type=float, default=None, help="interference: a short request every t seconds")
    a("--stream-output-len", type=int, default=None, help="interference: tokens per stream reply (then another)")
    a("--duration-s", type=float, default=None, help="interference: seconds of the loaded phase")


def spec_from_args(args: argparse.Namespace):
    return preset(args.preset, num_streams=args.streams, long_len=args.long_prompt_len,
                  long_every_s=args.long_every_s, short_len=args.short_prompt_len,
                  short_every_s=args.short_every_s, stream_output_len=args.stream_output_len,
                  duration_s=args.duration_s)


def compact_samples(phases: Phases, t0: float) -> list[dict]:
    """Every short and long request (the streams' gaps are in the figures), send times from `t0`."""
    out = []
    for phase, samples in (("idle", phases.idle_shorts), ("solo", phases.solo_longs),
                           ("loaded", phases.longs), ("loaded", phases.shorts)):
        for s in samples:
            row = s.to_json()
            row.pop("chunk_times_s")
            row.update(phase=phase, kind=s.request_id.split("-")[0], t_send_s=s.t_send_s - t0)
            out.append(row)
    return out


async def run_interference_bench(args: argparse.Namespace) -> dict:
    """Run the interference workload; print its table; write its files unless --no-save."""
    spec = spec_from_args(args)
    fmt = args.prompt_format if args.prompt_format != "auto" else ("text" if args.endpoint == "chat" else "tokens")
    extra = extra_body(args)
    requests = Requests(spec, fmt, args.vocab_size, args.seed)
    in_flight = spec.num_streams + int(spec.long_every_s / spec.short_every_s) + 8
    async with BenchClient(args.base_url, args.uds, args.endpoint, args.model, args.api_key,
                           max_connections=in_flight, transport=args.transport, ignore_eos=args.ignore_eos,
                           timeout_s=args.timeout, extra_body=extra) as client:
        model = await client.resolve_model()
        for _ in range(args.warmup):  # unmeasured: the first requests pay for lazy set-up
            await client.send(requests.make("short"))
        t0 = time.perf_counter()
        phases = await run_interference(client.send, client.recorder_for, requests)

    figures = interference_figures(phases)
    config = {k: v for k, v in vars(args).items() if k != "api_key" and not callable(v)}
    config.update(model=model, workload="interference", spec=spec.__dict__, prompt_format=fmt)
    result = {"config": config, "machine": machine_info(), "figures": figures,
              "samples": compact_samples(phases, t0)}
    title = (f"interference: {model}, {spec.num_streams} streams, a {spec.long_len:,}-token prompt every "
             f"{spec.long_every_s:g} s, a {spec.short_len}-token request every {spec.short_every_s:g} s")
    table = interference_table([(args.label or "run", figures)], title)
    print(table, end="")
    if args.save:
        result["paths"] = write_report(result, args.result_dir, markdown=table)
        print(f"wrote {result['paths']['json']}")
    return result
