"""Live replicas and routers for the router's HTTP tests (tests/router/fleet.py, tests/live_server.py)."""
from live_server import free_port, launch, start_server  # noqa: F401
