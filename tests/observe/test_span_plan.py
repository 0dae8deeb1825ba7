"""The spans planned from a trace: a root over the request, children that tile it edge by edge,
the prefill and decode phases, and the attributes an operator filters on."""
from __future__ import annotations

from observe.span_plan import ROOT_NAME, plan_spans
from stages.trace import RequestTrace


def finished_trace() -> RequestTrace:
    trace = RequestTrace("r-1")
    for i, edge in enumerate(("received", "parsed", "tokenized", "queued", "first_scheduled",
                              "first_token_sampled", "first_token_written", "finished")):
        trace.mark(edge, 1_000 + 100 * i)
    trace.info.update(num_prompt_tokens=7, num_output_tokens=3, num_cached_tokens=0, lane="short",
                      num_preemptions=2, finish_reason="stop", shadow={"not": "plain"})
    return trace


def test_the_root_covers_the_request_and_the_edges_tile_it_in_order() -> None:
    root, *children = plan_spans(finished_trace(), {"ttft.kv_cache_dtype": "fp8"})
    assert (root.name, root.start_ns, root.end_ns, root.is_root) == (ROOT_NAME, 1_000, 1_700, True)
    edges = [c for c in children if c.name not in ("prefill", "decode")]
    assert [c.name for c in edges] == ["parsed", "tokenized", "queued", "first_scheduled", "first_token_sampled",
                                       "first_token_written", "finished"]
    assert [(c.start_ns, c.end_ns) for c in edges] == [(1_000 + 100 * i, 1_100 + 100 * i) for i in range(7)]
    phases = {c.name: (c.start_ns, c.end_ns) for c in children if c.name in ("prefill", "decode")}
    assert phases == {"prefill": (1_400, 1_500), "decode": (1_500, 1_700)}
    assert [c.start_ns for c in children] == sorted(c.start_ns for c in children)


def test_the_root_carries_the_filterable_attributes_and_only_plain_values() -> None:
    root = plan_spans(finished_trace(), {"ttft.kv_cache_dtype": "fp8"})[0]
    assert root.attributes == {
        "ttft.request_id": "r-1", "ttft.kv_cache_dtype": "fp8", "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3, "ttft.cached_tokens": 0, "ttft.lane": "short", "ttft.preemptions": 2,
        "gen_ai.response.finish_reasons": "stop", "ttft.time_to_first_token_ms": 0.0006,
    }


def test_a_request_refused_before_its_body_has_no_spans_and_a_short_one_no_phases() -> None:
    assert plan_spans(RequestTrace("r-2")) == []
    trace = RequestTrace("r-3")
    trace.mark("received", 10)
    trace.mark("parsed", 20)
    trace.info["error"] = "bad"
    root, child = plan_spans(trace)
    assert (child.name, child.start_ns, child.end_ns) == ("parsed", 10, 20)
    assert root.attributes["error.type"] == "bad"
