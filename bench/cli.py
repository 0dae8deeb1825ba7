"""`ttft bench` (also `python -m bench`): its arguments, and the one place that dispatches them:
`--rounds` (bench/rounds.py: the round-by-round table, a server per round), `--ablate`
(bench/ablate.py: a server per configuration; `--ablate interference`: bench/interference_ablate.py)
or one run against a server (bench/load.py)."""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from bench.ablate import run_ablation
from bench.ablate_workloads import SCALES
from bench.extra_body import add_extra_body_arguments
from bench.interference_ablate import run_interference_ablation
from bench.interference_cli import add_interference_arguments
from bench.load import WORKLOADS, run_bench
from bench.metrics import METRIC_NAMES, PERCENTILES
from bench.multi_turn_cli import add_multi_turn_arguments
from bench.rounds import run_rounds
from bench.workloads import DEFAULT_VOCAB_SIZE

# In the directory `ttft bench` runs from, never inside the installed package or the source tree
# (bench/results/ holds the project's own measured runs, each placed there by hand).
DEFAULT_RESULT_DIR = Path("ttft-bench-results")


def _rate(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"rate must be > 0 or inf, got {text}")
    return value


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or any(n not in METRIC_NAMES for n in names):
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {','.join(METRIC_NAMES)}, got {text!r}")
    return names


def _percentiles(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(p) for p in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0 <= p <= 100 for p in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated percentiles in [0, 100] (e.g. 25,50,99), "
                                         f"got {text!r}")
    return values


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts, got {text!r}") from None
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated token counts >= 1, got {text!r}")
    return lengths


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--base-url", default="http://127.0.0.1:8000", help="server root, without /v1")
    a("--uds", default=None, help="connect through this Unix socket instead of TCP")
    a("--model", default=None, help="model name to send (default: the first of GET /v1/models)")
    a("--endpoint", choices=("completions", "chat"), default="completions")
    a("--workload", choices=WORKLOADS, default="random")
    a("--num-requests", "--num-prompts", dest="num_requests", type=int, default=100)
    a("--concurrency", type=int, default=8, help="closed loop: requests in flight")
    a("--rate", type=_rate, default=None, help="open loop: Poisson arrivals per second (inf: all at once)")
    a("--max-concurrency", type=int, default=None, help="open loop: cap on requests in flight")
    a("--input-len", type=int, default=1024, help="prompt tokens (mixed: the short prompts; "
                                                  "shared-prefix: each suffix)")
    a("--output-len", type=int, default=128)
    a("--range-ratio", type=float, default=0.0,
      help="random: prompt lengths uniform in input-len x [1 - r, 1 + r] (vllm's --random-range-ratio)")
    a("--long-len", type=int, default=1024, help="mixed: tokens of the long prompts")
    a("--long-fraction", type=float, default=0.25, help="mixed: fraction of long prompts")
    a("--prefix-len", type=int, default=1024, help="shared-prefix: tokens of each group's prefix")
    a("--num-prefix-groups", type=int, default=4, help="shared-prefix: number of groups")
    a("--reference-lengths", type=_lengths, default=None,
      help="reference: the prompt lengths it cycles through (default 512,1024,2048,4096; smaller for a CPU)")
    a("--prompt-format", choices=("auto", "tokens", "text"), default="auto",
      help="token ids (exact lengths) or text from a word list; auto: tokens for completions, text for chat")
    a("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE, help="random token ids stay below this")
    a("--seed", type=int, default=0)
    a("--api-key", default=os.environ.get("OPENAI_API_KEY"))
    a("--warmup", type=int, default=2, help="unmeasured requests run first")
    a("--transport", choices=("raw", "httpx"), default="raw")
    a("--timeout", type=float, default=600.0, help="per-request limit in seconds")
    a("--no-ignore-eos", dest="ignore_eos", action="store_false", help="let EOS end replies early")
    add_extra_body_arguments(parser)
    a("--result-dir", default=str(DEFAULT_RESULT_DIR), help="where the run's JSON, Markdown and plots go "
                                                            "(default: ./ttft-bench-results)")
    a("--label", default=None, help="name for this run in file names and tables")
    a("--no-save", dest="save", action="store_false", help="print only, write no files")
    a("--ablate", nargs="?", const="reference", default=None, choices=WORKLOADS, metavar="WORKLOAD",
      help="start `ttft serve --model MODEL` once per configuration, one optimization off at a time, and run "
           "WORKLOAD (default: reference) against each; prints TTFT per configuration (bench/ablate.py)")
    a("--rounds", action="store_true",
      help="the round-by-round table: the reference workload through transformers generate(), transformers' "
           "continuous batching, then ttft with its mechanisms switched on round by round, a server each "
           "(bench/rounds.py); --model (default: the packaged model) and --serve-args apply")
    a("--serve-args", default="", help="ablate, rounds: flags for every `ttft serve`, one string ('--seed 0 ...')")
    a("--hf-args", default="", help="rounds: flags for the transformers servers (bench/baselines/hf_server.py); "
                                    "they get --seed, --device and --max-model-len from --serve-args")
    a("--ablate-configs", default=None, help="ablate: comma-separated subset of configurations (default: all)")
    a("--ablate-workloads", default="auto",
      help="ablate: the mechanism workloads (shared-prefix, multi-turn, mixed, pool-full, decode-64), "
           "comma-separated, all or none; auto: all with the reference workload, none with another")
    a("--ablate-scale", choices=SCALES, default="full",
      help="ablate: size of the mechanism workloads (full: the H200's; smoke: dummy:tiny on a CPU)")
    a("--budget-s", type=float, default=0.0, help="ablate, rounds: start no server past this many seconds "
                                                   "(0: no limit); what is left is listed as not run")
    add_multi_turn_arguments(parser)
    add_interference_arguments(parser)
    add_vllm_arguments(parser)


def add_vllm_arguments(parser: argparse.ArgumentParser) -> None:
    """`vllm bench serve`'s names for what ttft bench also does: its datasets, goodput, percentiles."""
    g = parser.add_argument_group("as vllm bench serve names them")
    a = g.add_argument
    a("--dataset-name", choices=("random", "sharegpt"), default=None,
      help="the workload by vLLM's dataset name (overrides --workload)")
    a("--dataset-path", default=None, help="sharegpt: a local ShareGPT JSON file (bench/data/sharegpt_sample.json)")
    a("--sharegpt-output-len", type=int, default=None, help="sharegpt: every request's output length "
                                                            "(default: the reply's length in the file)")
    a("--no-oversample", dest="oversample", action="store_false",
      help="sharegpt: with fewer usable conversations than requests, run only those (default: draw again)")
    a("--tokenizer", default=None, help="sharegpt: count tokens with 'dummy' or a model directory "
                                        "(default: the server's POST /tokenize)")
    a("--goodput", nargs="+", default=None, metavar="KEY:MS",
      help="SLOs for goodput, e.g. ttft:200 tpot:50 e2el:2000 (requests meeting all of them)")
    a("--percentile-metrics", type=_names, default=METRIC_NAMES,
      help="metrics reported with percentiles, comma-separated (default: ttft,tpot,itl,e2el)")
    a("--metric-percentiles", type=_percentiles, default=PERCENTILES,
      help="the percentiles reported, comma-separated (default: 50,95,99)")


def run_bench_command(args: argparse.Namespace) -> int:
    """`ttft bench` and `python -m bench` with parsed arguments: the ablation (a run of servers) or
    one run against a server. Exit status: 0, 1 when a request failed, 2 on an error."""
    if args.rounds:
        return run_rounds(args)
    if args.ablate == "interference":  # its own pair of servers: concurrent lanes on and off
        return run_interference_ablation(args)
    if args.ablate:
        return run_ablation(args)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:
        runner = asyncio.run
    try:
        result = runner(run_bench(args))
    except (RuntimeError, OSError, ValueError) as e:  # server down, warm-up failed, bad arguments
        print(f"ttft bench: error: {e}", file=sys.stderr)
        return 2
    failed = result["figures"]["failed"] if args.workload == "interference" else result["metrics"]["failed"]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttft bench", description=__doc__)
    add_bench_arguments(parser)
    return run_bench_command(parser.parse_args(argv))
