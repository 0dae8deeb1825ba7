"""examples/router/: the Kubernetes manifest and the systemd units run commands that `ttft` parses,
with a router whose --replica list names every replica the manifest starts."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from pipeline.cli import build_parsers
from router.cli import RouteOptions, check_route_options
from stages.options import from_args

yaml = pytest.importorskip("yaml")  # PyYAML comes with transformers (a test extra)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "router"


def parse(argv: list[str]):
    parser, _ = build_parsers()
    return parser.parse_args(argv)


def routed_urls(argv: list[str]) -> list[str]:
    args = parse(argv)
    assert args.command == "route"
    return check_route_options(args.replica, from_args(RouteOptions, args))


def test_the_kubernetes_router_names_every_replica_of_the_statefulset() -> None:
    docs = {d["kind"] + "/" + d["metadata"]["name"]: d for d in yaml.safe_load_all((EXAMPLES / "kubernetes.yaml").read_text())}
    replicas = docs["StatefulSet/ttft"]
    serve_args = replicas["spec"]["template"]["spec"]["containers"][0]["args"]
    assert parse(serve_args).command == "serve"
    route_args = docs["Deployment/ttft-router"]["spec"]["template"]["spec"]["containers"][0]["args"]
    urls = routed_urls(route_args)
    service = replicas["spec"]["serviceName"]
    assert urls == [f"http://ttft-{i}.{service}:8000" for i in range(replicas["spec"]["replicas"])]


def exec_start(unit: str) -> list[str]:
    text = (EXAMPLES / unit).read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert argv[0].endswith("/ttft")
    return argv[1:]


def test_the_systemd_router_fronts_the_replica_units_ports() -> None:
    serve = exec_start("ttft-replica@.service")
    assert parse([a.replace("%i", "0") for a in serve]).port == 8100
    assert routed_urls(exec_start("ttft-router.service")) == ["http://127.0.0.1:8100", "http://127.0.0.1:8101"]
