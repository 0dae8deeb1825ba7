"""A request's timings from its trace: only spans whose two edges are marked, in ms, as headers too."""
from __future__ import annotations

from observe.timings import timing_headers, timings_ms
from observe.trace_query import traces_of
from stages.trace import RequestTrace


def test_only_what_is_marked_is_given() -> None:
    trace = RequestTrace("r")
    for edge, at_ms in (("received", 0), ("parsed", 1), ("tokenized", 3), ("queued", 4), ("first_scheduled", 10),
                        ("first_token_sampled", 30)):
        trace.mark(edge, at_ms * 1_000_000)
    assert timings_ms(trace) == {"parse_ms": 1.0, "tokenize_ms": 2.0, "queue_ms": 6.0, "prefill_ms": 20.0,
                                 "first_token_ms": 30.0}
    assert timing_headers(trace)["x-ttft-first-token-ms"] == "30.000"
    trace.mark("finished", 45_500_000)
    assert timings_ms(trace)["decode_ms"] == 15.5 and timing_headers(trace)["x-ttft-total-ms"] == "45.500"


def test_a_request_id_selects_its_own_trace_or_its_sequences() -> None:
    traces = [RequestTrace(rid) for rid in ("a", "a-0", "a-1", "a-0-1", "ab", "a-x", "b-0")]
    assert [t.request_id for t in traces_of(traces, "a")] == ["a", "a-0", "a-1", "a-0-1"]
    assert [t.request_id for t in traces_of(traces, "a-1")] == ["a-1"]
    assert traces_of(traces, "c") == []
