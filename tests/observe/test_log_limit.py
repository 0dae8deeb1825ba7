"""A chatty logger's records pass once per interval, the next one saying how many were held back."""
from __future__ import annotations

import logging

import pytest

from observe.log_limit import OncePerInterval, limit_loggers


def test_one_record_per_interval_and_the_count_of_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("observe.log_limit.time.monotonic", lambda: now[0])
    limit = OncePerInterval(60.0)
    record = lambda: logging.LogRecord("x", logging.WARNING, __file__, 1, "export failed", None, None)  # noqa: E731
    assert limit.filter(record())
    assert [limit.filter(record()) for _ in range(5)] == [False] * 5
    now[0] += 61
    passed = record()
    assert limit.filter(passed) and passed.msg == "export failed (5 similar messages suppressed)"


def test_every_named_logger_shares_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    names = ("ttft-test.a", "ttft-test.b")
    limit = limit_loggers(names, 60.0)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                for name in names:
                    logging.getLogger(name).warning("down")
        assert len(caplog.records) == 1 and limit.num_suppressed == 5
    finally:
        for name in names:
            logging.getLogger(name).removeFilter(limit)
