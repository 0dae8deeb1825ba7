"""`ttft route`: the router in front of replicas started by anyone (systemd, Kubernetes, `ttft serve`).

Flags are checked before anything starts (a mistake is one line naming the flag, exit status 2),
then the address is bound, then the router's own front server (router/front_server.py) serves RouterApp.
"""
from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit

from pipeline.flag_checks import UsageError
from router.policies import POLICIES
from stages.options import add_options, from_args, option


@dataclass
class RouteOptions:
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "TCP port to listen on (0: any free port, logged once bound)")
    routing_policy: str = option("predicted-ttft", "how a replica is picked for each request",
                                 choices=tuple(POLICIES))
    health_interval_s: float = option(0.5, "seconds between health checks of each replica")
    health_timeout_s: float = option(1.0, "a replica whose health check takes longer is taken out")
    max_body_bytes: int = option(16 * 1024 * 1024, "largest request body the router reads (413 past it)")
    log_level: str = option("info", "logging level: debug, info, warning, error")
    replica_api_key: str | None = option(None, "bearer token the router sends on its own requests to the "
                                               "replicas (state and KV events; or TTFT_API_KEY); clients' "
                                               "requests go on with their own Authorization")


def add_route_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replica", action="append", default=[], metavar="URL",
                   help="a replica's base URL, http://HOST:PORT (repeat for each replica)")
    add_options(p, RouteOptions)


def check_replica_url(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None or parts.path not in ("", "/"):
        raise UsageError(f"--replica {url}: must be http://HOST:PORT (https replicas are not supported)")
    return url.rstrip("/")


def check_route_options(urls: list[str], opts: RouteOptions) -> list[str]:
    if not urls:
        raise UsageError("--replica: give at least one replica URL")
    checked = [check_replica_url(u) for u in urls]
    if len(set(checked)) != len(checked):
        raise UsageError("--replica: a replica is given twice")
    if not opts.health_interval_s > 0:
        raise UsageError(f"--health-interval-s {opts.health_interval_s}: must be > 0")
    if not opts.health_timeout_s > 0:
        raise UsageError(f"--health-timeout-s {opts.health_timeout_s}: must be > 0")
    if opts.max_body_bytes < 1:
        raise UsageError(f"--max-body-bytes {opts.max_body_bytes}: must be >= 1")
    if opts.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise UsageError(f"--log-level {opts.log_level}: must be debug, info, warning or error")
    opts.replica_api_key = resolve_replica_api_key(opts.replica_api_key)
    return checked


def resolve_replica_api_key(cli_value: str | None, flag: str = "--replica-api-key") -> str | None:
    """The key from `--replica-api-key`, else $TTFT_API_KEY (the one `ttft serve` reads, so one
    variable serves a whole deployment); None when neither is set. The message never holds the key."""
    from pipeline.auth import API_KEY_ENV, resolve_api_key

    try:
        return resolve_api_key(cli_value)
    except ValueError as exc:
        source = flag if cli_value is not None else f"${API_KEY_ENV}"
        raise UsageError(f"{source}: {exc}") from None


def run_route(args: argparse.Namespace) -> int:
    """Check, bind, serve; UsageError for what the user must change."""
    opts = from_args(RouteOptions, args)
    urls = check_route_options(args.replica, opts)
    args.replica_api_key = None  # the key lives only in the health watch from here on
    from pipeline.listen_socket import bind_tcp

    listener = bind_tcp(opts.host, opts.port)
    return serve_router(urls, opts, listener)


def serve_router(urls: list[str], opts: RouteOptions, listener) -> int:
    import uvloop

    from router.core import Router
    from router.front_server import FrontServer
    from router.proxy import RouterApp

    logging.basicConfig(level=opts.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    router = Router(urls, opts.routing_policy, opts.health_interval_s, opts.health_timeout_s,
                    api_key=opts.replica_api_key)
    app = RouterApp(router, opts.max_body_bytes, connect_timeout_s=opts.health_timeout_s)
    log = logging.getLogger("ttft.router")

    async def serve() -> None:
        server = FrontServer(app, opts.max_body_bytes, shutdown_s=5.0, forward=app)
        await server.serve(listener.sockets, lambda: log.info("routing to %d replicas (%s) on %s", len(urls),
                                                              opts.routing_policy, listener.url))

    try:
        uvloop.run(serve())
    finally:
        listener.close()
    return 0
