"""`ttft serve` and `ttft bench`."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass

from pipeline.config import EngineConfig
from stages.options import add_options, from_args, option


@dataclass
class ServeOptions:
    """The flags of `ttft serve` that are not the engine's: where and how it listens."""
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "TCP port to listen on")
    uds: str | None = option(None, "serve on this Unix domain socket instead of TCP")
    api_key: str | None = option(None, "bearer token for every inference route (or TTFT_API_KEY)")
    protect_metrics: bool = option(False, "/metrics needs the API key too", action="store_true")
    log_level: str = option("info", "logging level: debug, info, warning, error")
    # TLS, with vLLM's names and uvicorn's meaning (pipeline/tls.py checks them before start-up).
    ssl_keyfile: str | None = option(None, "TLS: the server's private key (PEM, unencrypted)")
    ssl_certfile: str | None = option(None, "TLS: the server's certificate chain (PEM); serve https")
    ssl_ca_certs: str | None = option(None, "TLS: CA certificates that client certificates must chain to")
    ssl_cert_reqs: int = option(0, "TLS: client certificates 0 not asked for, 1 optional, 2 required "
                                   "(Python's ssl.CERT_* numbers)")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_options(p.add_argument_group("engine"), EngineConfig)
    add_options(p.add_argument_group("server"), ServeOptions)


def config_from_args(a: argparse.Namespace) -> EngineConfig:
    return from_args(EngineConfig, a)


# Spins of an idle OpenMP worker before it sleeps (libgomp's GOMP_SPINCOUNT). Served on the
# 2-core VM, ITL P50 at 1 / 4 clients: 3,000 spins 34.6 / 50.4 ms, 10,000 30.7 / 42.7, 30,000
# 28.4 / 41.9, sleeping at once 47.4 / 58.1.
CPU_SPIN_COUNT = 20000


def serves_on_cpu(device: str) -> bool:
    """Whether `--device` means the CPU, decided without importing torch: `cpu`, or `auto` on a
    host without an NVIDIA driver (torch.cuda.is_available() needs one)."""
    return device == "cpu" or (device == "auto" and not os.path.exists("/proc/driver/nvidia"))


def set_cpu_openmp_env(device: str) -> None:
    """CPU serving: OpenMP workers spin a little at their barriers, then sleep (an explicit setting
    wins). A decode step is some 200 parallel regions; a worker asleep between two of them is woken
    by a futex, ~40 us here, twice a region: on the 2-core VM a served SmolLM2 decode took 50 ms
    per token with sleeping workers and 31 ms with GOMP_SPINCOUNT's spin between regions (about a
    millisecond at most; bench/results/20261206-cpu/). Spinning holds a core, so while other
    processes want the cores the steps run on one thread (gpu_stage/cpu_threads.py), and
    OMP_WAIT_POLICY=PASSIVE stops the spin wherever libgomp finds more threads than cores. libgomp
    reads both once, when torch loads it, so they are set before anything imports torch
    (pipeline/__init__.py imports the engine lazily for this). A GPU server keeps the defaults."""
    if serves_on_cpu(device):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("GOMP_SPINCOUNT", str(CPU_SPIN_COUNT))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttft", description="An LLM server obsessed with time to first token")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="serve a model over an OpenAI-compatible API"))
    from bench.cli import add_bench_arguments, run_bench_command

    add_bench_arguments(sub.add_parser("bench", help="load-test an OpenAI-compatible server"))
    args = parser.parse_args(argv)
    if args.command == "serve":
        set_cpu_openmp_env(args.device)
        # Tokenizing runs one text at a time in our own thread pool: no rayon pool beside it.
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        from pipeline.auth import check_api_key, resolve_api_key
        from pipeline.build import StartupError, run_worker_rank
        from pipeline.build_parallel import is_worker_rank
        from pipeline.server import serve
        from pipeline.tls import tls_settings

        try:
            if is_worker_rank(config := config_from_args(args)):  # torchrun's other ranks
                return run_worker_rank(config)
            opts = from_args(ServeOptions, args)
            tls = tls_settings(opts.ssl_keyfile, opts.ssl_certfile, opts.ssl_ca_certs, opts.ssl_cert_reqs)
            api_key = resolve_api_key(opts.api_key)
            if api_key is not None:
                check_api_key(api_key)
            args.api_key = opts.api_key = None  # the key lives only in the middleware from here on
            return serve(config, opts.host, opts.port, opts.uds, opts.log_level,
                         api_key=api_key, protect_metrics=opts.protect_metrics, tls=tls)
        except (StartupError, ValueError) as exc:
            print(f"ttft: cannot start: {exc}", file=sys.stderr)
            return 2
    return run_bench_command(args)


if __name__ == "__main__":
    sys.exit(main())
