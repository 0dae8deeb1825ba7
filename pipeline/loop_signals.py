"""SIGINT and SIGTERM handled on the event loop, for a uvicorn server's `capture_signals`.

Through the loop (its wakeup fd), not signal.signal: the handler must run on the loop even while
worker threads hold the interpreter, and must not re-raise the signal on exit (uvicorn's own
capture_signals does, which would end the process with the signal's status after a clean stop).
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_on_loop(handle_exit: Callable[[int, object], None]) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, handle_exit, sig, None)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
