"""A real `ttft serve` process on loopback for HTTP tests (tests/live_server.py).

Here `tiny_server` is one server for every file of the folder that a worker runs, not one per file:
these files look only at their own requests (each by a request id of its own) and at values read
together at one moment, so a server that served the others' requests first proves the same, and
each start costs a process's imports and a model's load. A file that counts the server's whole life
imports live_server's module-scoped `tiny_server` instead (test_dashboard_browser.py)."""
import pytest

from live_server import TINY_FLAGS, ServerProcess, free_port, launch, start_server  # noqa: F401


@pytest.fixture(scope="session")
def tiny_server(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("tiny"), *TINY_FLAGS)
    yield server
    server.stop()
