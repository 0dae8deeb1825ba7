"""At most one log record per interval from a chatty logger (a dead collector's exporter logs every
batch it fails to send; an operator needs to hear it once a minute, not fill a disk)."""
from __future__ import annotations

import logging
import threading
import time

DEFAULT_INTERVAL_S = 60.0


class OncePerInterval(logging.Filter):
    """Passes a record when the previous one passed at least `interval_s` ago; counts the rest and
    says how many were held back in the next record it passes."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.num_suppressed = 0
        self._last_s = -float("inf")
        self._lock = threading.Lock()  # records come from the exporter's threads

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        with self._lock:
            if now - self._last_s < self.interval_s:
                self.num_suppressed += 1
                return False
            self._last_s = now
            held, self.num_suppressed = self.num_suppressed, 0
        if held:
            record.msg = f"{record.msg} ({held} similar messages suppressed)"
        return True


def limit_loggers(names: tuple[str, ...], interval_s: float = DEFAULT_INTERVAL_S) -> OncePerInterval:
    """Put one shared filter on each named logger (a filter on a parent does not see its children's
    records, so each logger that writes is named)."""
    limit = OncePerInterval(interval_s)
    for name in names:
        logging.getLogger(name).addFilter(limit)
    return limit
