"""A real `ttft serve` process on loopback for HTTP tests (tests/live_server.py)."""
from live_server import ServerProcess, free_port, launch, start_server, tiny_server  # noqa: F401
