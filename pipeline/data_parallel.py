"""`ttft serve --data-parallel-size N`: N engines on this host and the router in front, one command.

Each engine is a `ttft serve` child process on a free loopback port, started with the parent's own
flags less those that say where to listen, and given its share of the machine: on a GPU host its
own devices (CUDA_VISIBLE_DEVICES, `--tensor-parallel-size` of them each); on CPU its own cores
(an affinity mask, and `--cpu-threads` to match unless the user set it), because engines sharing
cores slow each other more than they gain. The parent then serves `ttft route` on `--host/--port`.
A child whose parent dies is sent SIGTERM by the kernel (PR_SET_PDEATHSIG), so nothing is left
running; when the router stops, the children are drained with SIGTERM and waited for.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys

from pipeline.flag_checks import UsageError

log = logging.getLogger("ttft.data_parallel")
# Flags (with one value each) that belong to the front, not to an engine behind it.
FRONT_FLAGS = frozenset({"--data-parallel-size", "-dp", "--host", "--port", "--uds", "--uds-mode", "--uds-group"})
UNSUPPORTED = ("--uds", "--ssl-keyfile", "--ssl-certfile")  # the router serves plain TCP
CHILD_STOP_S = 40.0  # past --shutdown-grace-s's default, so a drain is not cut short


def replica_argv(argv: list[str], port: int, cpu_threads: int | None) -> list[str]:
    """`ttft serve` flags for one engine: `argv` (the parent's, after `serve`) less the front's flags,
    on loopback at `port`."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in FRONT_FLAGS:
            skip = "=" not in arg
            continue
        out.append(arg)
    out += ["--host", "127.0.0.1", "--port", str(port)]
    if cpu_threads is not None and not any(a.split("=", 1)[0] == "--cpu-threads" for a in out):
        out += ["--cpu-threads", str(cpu_threads)]
    return out


def check_data_parallel(argv: list[str]) -> None:
    for flag in UNSUPPORTED:
        if any(a.split("=", 1)[0] == flag for a in argv):
            raise UsageError(f"{flag}: not supported with --data-parallel-size (the router serves plain TCP)")


def cpu_shares(num_replicas: int, cores: list[int]) -> list[list[int]]:
    """Cores split into `num_replicas` contiguous shares (at least one core each, shared if too few)."""
    if len(cores) < num_replicas:
        return [[cores[i % len(cores)]] for i in range(num_replicas)]
    per = len(cores) // num_replicas
    return [cores[i * per:(i + 1) * per] for i in range(num_replicas)]


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the parent's own stop still ends its children
        pass


def start_replicas(argv: list[str], num_replicas: int, on_cpu: bool, tp_size: int) -> list[tuple[subprocess.Popen, str]]:
    from pipeline.listen_socket import bind_tcp

    cores = sorted(os.sched_getaffinity(0))
    shares = cpu_shares(num_replicas, cores)
    started = []
    for i in range(num_replicas):
        probe = bind_tcp("127.0.0.1", 0)  # a free port, given back for the child to bind at once
        port = int(probe.url.rsplit(":", 1)[1])
        probe.close()
        env = dict(os.environ)
        share = shares[i]
        if not on_cpu:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in range(i * tp_size, (i + 1) * tp_size))

        def preexec(share=share) -> None:
            _die_with_parent()
            if on_cpu:
                os.sched_setaffinity(0, share)

        cmd = [sys.executable, "-m", "pipeline.cli", "serve",
               *replica_argv(argv, port, len(share) if on_cpu else None)]
        started.append((subprocess.Popen(cmd, env=env, preexec_fn=preexec), f"http://127.0.0.1:{port}"))
        log.info("engine %d of %d on port %d%s", i + 1, num_replicas, port,
                 f", cores {share[0]}-{share[-1]}" if on_cpu else "")
    return started


def stop_replicas(children: list[subprocess.Popen]) -> None:
    for proc in children:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in children:
        try:
            proc.wait(CHILD_STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_data_parallel(argv: list[str], num_replicas: int, on_cpu: bool, tp_size: int, host: str, port: int,
                        log_level: str, replica_api_key: str | None = None) -> int:
    """Bind the front first (a taken port is a usage error before any engine starts), then the engines,
    then the router until it stops. The engines' key (`--api-key`, else $TTFT_API_KEY, which they
    inherit) is the router's for its own requests to them."""
    from pipeline.listen_socket import bind_tcp
    from router.cli import RouteOptions, resolve_replica_api_key, serve_router

    check_data_parallel(argv)
    replica_api_key = resolve_replica_api_key(replica_api_key, "--api-key")
    listener = bind_tcp(host, port)
    children = start_replicas(argv, num_replicas, on_cpu, tp_size)
    try:
        opts = RouteOptions(host=host, port=port, log_level=log_level, replica_api_key=replica_api_key)
        return serve_router([url for _, url in children], opts, listener)
    finally:
        stop_replicas([proc for proc, _ in children])
