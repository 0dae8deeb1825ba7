"""Attacks: every hostile input or client behaviour the server has been tried with, one test each,
in one place that each new surface extends (a file per surface: HTTP connections, chat and token
routes, tensor parallelism, ...). Each test says what the attack is and what the server must do
(../shared/RELIABILITY.md): a clear 4xx or a closed socket, never a traceback, a stall of /health,
or a lock-out of other clients."""
from live_server import ServerProcess, free_port, launch, start_server, tiny_server  # noqa: F401
