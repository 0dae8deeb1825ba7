"""W3C traceparent: a valid header names the caller's span; anything else is ignored, never an error."""
from __future__ import annotations

import pytest

from observe.traceparent import ParentSpan, parse_traceparent, valid_traceparent

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_a_valid_header_gives_the_callers_ids_and_sampling() -> None:
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-01") == ParentSpan(int(TRACE, 16), int(SPAN, 16), True)
    assert parse_traceparent(f"00-{TRACE}-{SPAN}-00").sampled is False
    assert parse_traceparent(f" 00-{TRACE}-{SPAN}-03 ").sampled is True  # other flag bits ignored


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    assert parse_traceparent(f"01-{TRACE}-{SPAN}-01-future") is not None


@pytest.mark.parametrize("value", [
    None, "", "garbage", f"00-{TRACE}-{SPAN}", f"00-{TRACE.upper()}-{SPAN}-01", f"ff-{TRACE}-{SPAN}-01",
    f"00-{'0' * 32}-{SPAN}-01", f"00-{TRACE}-{'0' * 16}-01", f"00-{TRACE}-{SPAN}-01-extra",
    f"00-{TRACE[:-1]}-{SPAN}-01", f"00-{TRACE}-{SPAN}-zz", "0" * 10_000,
])
def test_an_invalid_header_is_ignored(value: str | None) -> None:
    assert parse_traceparent(value) is None
    assert valid_traceparent(value) is None
