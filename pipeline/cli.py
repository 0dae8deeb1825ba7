"""`ttft serve`, `ttft route` and `ttft bench` (and `ttft --version`).

`ttft serve` checks before it starts anything: the flags' ranges (pipeline/flag_checks.py), then the
model and the flags that need a look at the disk (pipeline/model_checks.py), then it binds its address
(pipeline/listen_socket.py), all before torch loads; then the device. A mistake is one line naming the
flag, and exit status 2. Only then does the server start and the model load. `ttft serve MODEL` is `ttft serve --model MODEL`, as vLLM spells it."""
from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from dataclasses import dataclass

from pipeline.config import EngineConfig
from pipeline.flag_checks import StartupError, UsageError, check_flag_ranges, flag_names
from stages.options import add_options, from_args, option


@dataclass
class ServeOptions:
    """The flags of `ttft serve` that are not the engine's: where and how it listens."""
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "TCP port to listen on (0: any free port, logged once bound)")
    uds: str | None = option(None, "serve on this Unix domain socket instead of TCP")
    uds_mode: str = option("0600", "permissions of the --uds socket file, octal (0660: its group may connect too)")
    uds_group: str | None = option(None, "group of the --uds socket file (one you belong to): with --uds-mode "
                                         "0660, its members may connect")
    api_key: str | None = option(None, "bearer token for every inference route (or TTFT_API_KEY)")
    protect_metrics: bool = option(False, "/metrics needs the API key too", action="store_true")
    log_level: str = option("info", "logging level: debug, info, warning, error")
    access_log: bool = option(False, "log a line per HTTP request (uvicorn's access log)")
    log_stats_interval_s: float = option(10.0, "seconds between one-line stats logs (throughput, running, "
                                               "waiting, KV use) while the server works; 0: none")
    # TLS, with vLLM's names and uvicorn's meaning (pipeline/tls.py checks them before start-up).
    ssl_keyfile: str | None = option(None, "TLS: the server's private key (PEM, unencrypted)")
    ssl_certfile: str | None = option(None, "TLS: the server's certificate chain (PEM); serve https")
    ssl_ca_certs: str | None = option(None, "TLS: CA certificates that client certificates must chain to")
    ssl_cert_reqs: int = option(0, "TLS: client certificates 0 not asked for, 1 optional, 2 required "
                                   "(Python's ssl.CERT_* numbers)")
    data_parallel_size: int = option(1, "N engines on this host (one per GPU group, or per share of the CPU "
                                        "cores) behind a router (`ttft route`) on --host/--port",
                                     aliases=("-dp",))


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_options(p.add_argument_group("engine"), EngineConfig)
    add_options(p.add_argument_group("server"), ServeOptions)


def add_model_argument(p: argparse.ArgumentParser) -> None:
    """vLLM's `serve MODEL`: the model as a positional argument, the same as --model."""
    p.add_argument("model_tag", nargs="?", default=None, metavar="MODEL", help="the same as --model MODEL")


def take_model_tag(args: argparse.Namespace) -> None:
    """Fold the positional MODEL into --model (giving two different models is an error)."""
    tag = args.model_tag
    if tag is not None:
        if args.model is not None and args.model != tag:
            raise UsageError(f"the model is given twice: {tag} and --model {args.model}")
        args.model = tag


def config_from_args(a: argparse.Namespace) -> EngineConfig:
    return from_args(EngineConfig, a)


# Spins of an idle OpenMP worker before it sleeps (libgomp's GOMP_SPINCOUNT): long enough to
# bridge the gap between two parallel regions of a CPU decode step, short enough (about a
# millisecond) that an idle server gives its cores back.
CPU_SPIN_COUNT = 20000


def serves_on_cpu(device: str) -> bool:
    """Whether `--device` means the CPU, decided without importing torch: `cpu`, or `auto` on a
    host without an NVIDIA driver (torch.cuda.is_available() needs one)."""
    return device == "cpu" or (device == "auto" and not os.path.exists("/proc/driver/nvidia"))


def set_cpu_openmp_env(device: str) -> None:
    """CPU serving: OpenMP workers spin a little at their barriers, then sleep (an explicit setting
    wins). A decode step is some 200 parallel regions, and a worker asleep between two of them is
    woken by a futex twice a region, which costs more than the spin (notes/cpu_serving.md).
    Spinning holds a core, so while other processes want the cores the steps run on one thread
    (gpu_stage/cpu_threads.py), and OMP_WAIT_POLICY=PASSIVE stops the spin wherever libgomp finds
    more threads than cores. libgomp reads both once, when torch loads it, so they are set before
    anything imports torch (pipeline/__init__.py imports the engine lazily for this). A GPU server
    keeps the defaults."""
    if serves_on_cpu(device):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("GOMP_SPINCOUNT", str(CPU_SPIN_COUNT))


def ttft_version() -> str:
    try:
        return importlib.metadata.version("ttft")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


COMMANDS = ("serve", "bench", "route")


def command_of(argv: list[str]) -> str | None:
    """The subcommand `argv` names: its first word that is not an option (`ttft`'s own options,
    --version and --help, take no value); None when there is none or it is no command."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def build_parsers(command: str | None = None) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """`ttft`'s parser, and its `serve` subparser (whose flags name the checks' messages). With a
    `command`, only that subcommand gets its arguments: the bench's pull in numpy and its report
    modules, which every `ttft serve` start would pay for (the others still parse as commands)."""
    parser = argparse.ArgumentParser(prog="ttft", description="An LLM server obsessed with time to first token")
    parser.add_argument("--version", action="version", version=f"ttft {ttft_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a model over an OpenAI-compatible API")
    add_model_argument(serve)
    add_serve_arguments(serve)
    bench = sub.add_parser("bench", help="load-test an OpenAI-compatible server")
    if command in (None, "bench"):
        from bench.cli import add_bench_arguments

        add_bench_arguments(bench)
    route = sub.add_parser("route", help="route requests across ttft replicas")
    if command in (None, "route"):
        from router.cli import add_route_arguments

        add_route_arguments(route)
    return parser, serve


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, serve_parser = build_parsers(command_of(argv))
    args = parser.parse_args(argv)
    if args.command == "serve":
        try:
            return run_serve(args, flag_names(serve_parser), argv[argv.index("serve") + 1:])
        except UsageError as exc:
            print(f"ttft serve: error: {exc}", file=sys.stderr)
            return 2
    if args.command == "route":
        from router.cli import run_route

        try:
            return run_route(args)
        except UsageError as exc:
            print(f"ttft route: error: {exc}", file=sys.stderr)
            return 2
    from bench.cli import run_bench_command

    return run_bench_command(args)


def run_serve(args: argparse.Namespace, flags: dict[str, str], serve_argv: list[str] | None = None) -> int:
    """Check everything, bind, then serve; UsageError for what the user must change. `serve_argv`:
    the flags as given, which --data-parallel-size passes on to each engine."""
    take_model_tag(args)
    check_flag_ranges(args, flags)
    if args.data_parallel_size > 1:
        from pipeline.data_parallel import serve_data_parallel

        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        return serve_data_parallel(serve_argv or [], args.data_parallel_size, serves_on_cpu(args.device),
                                   args.tensor_parallel_size, args.host, args.port, args.log_level,
                                   replica_api_key=args.api_key)
    set_cpu_openmp_env(args.device)
    # Tokenizing runs one text at a time in our own thread pool: no rayon pool beside it.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pipeline.auth import check_api_key, resolve_api_key
    from pipeline.listen_socket import bind_tcp, bind_uds
    from pipeline.model_checks import check_device_and_kv, check_model_and_flags
    from pipeline.tls import tls_settings
    from observe.otlp_settings import resolve_traces_endpoint

    # Everything up to the bind runs without torch, whose import is most of a refusal's time.
    try:
        config = config_from_args(args)
        resolve_traces_endpoint(config.otlp_traces_endpoint)  # before anything starts: a bad URL, no [otel]
        check_model_and_flags(config)
        if config.tensor_parallel_size > 1 and (code := run_if_worker_rank(config)) is not None:
            return code
        opts = from_args(ServeOptions, args)
        tls = tls_settings(opts.ssl_keyfile, opts.ssl_certfile, opts.ssl_ca_certs, opts.ssl_cert_reqs)
        api_key = resolve_api_key(opts.api_key)
        if api_key is not None:
            check_api_key(api_key)
        args.api_key = opts.api_key = None  # the key lives only in the middleware from here on
        if opts.uds is not None:
            listener = bind_uds(opts.uds, int(opts.uds_mode, 8), opts.uds_group)
        else:
            listener = bind_tcp(opts.host, opts.port, "https" if tls else "http")
        try:
            check_device_and_kv(config)
            from pipeline.server import serve
        except BaseException:
            listener.close()  # refused after all: nothing keeps the address (or its socket file)
            raise
        return serve(config, listener, opts.log_level.lower(), api_key=api_key, protect_metrics=opts.protect_metrics,
                     tls=tls, access_log=opts.access_log, log_stats_interval_s=opts.log_stats_interval_s)
    except UsageError:
        raise
    except (StartupError, ValueError) as exc:
        print(f"ttft: cannot start: {exc}", file=sys.stderr)
        return 2


def run_if_worker_rank(config: EngineConfig) -> int | None:
    """Under torchrun, a rank other than 0 of `ttft serve -tp N` runs the worker loop, not a server
    (it binds nothing): its exit status; None on rank 0 and outside torchrun."""
    from pipeline.build_parallel import is_worker_rank
    from pipeline.model_checks import check_device_and_kv

    if not is_worker_rank(config):
        return None
    check_device_and_kv(config)
    from pipeline.build import run_worker_rank

    return run_worker_rank(config)


def console_main() -> None:
    """The `ttft` command: main(), then the process ends without the interpreter's teardown
    (stages/process_exit.py)."""
    from stages.process_exit import end_process

    end_process(main())


if __name__ == "__main__":
    console_main()
