"""Traces as a Chrome/Perfetto trace file: one track per stage, one bar per request per stage.

A bar on track "tokenized" spans from the request's previous edge (parsed) to its tokenized mark,
so reading a column of tracks left to right follows one request through the pipeline.
"""
from __future__ import annotations

from typing import Iterable

from stages.trace import EDGES, RequestTrace

PID = 1


def traces_to_perfetto(traces: Iterable[RequestTrace]) -> dict:
    events: list[dict] = [{"ph": "M", "pid": PID, "name": "process_name", "args": {"name": "ttft"}}]
    for tid, edge in enumerate(EDGES[1:], start=1):
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name", "args": {"name": edge}})
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    track = {edge: tid for tid, edge in enumerate(EDGES[1:], start=1)}
    for trace in traces:
        for edge, start_ns, end_ns in trace.stage_spans():
            events.append({
                "ph": "X", "pid": PID, "tid": track[edge], "name": trace.request_id,
                "ts": start_ns / 1e3, "dur": (end_ns - start_ns) / 1e3,
                "args": {"request_id": trace.request_id, **_plain(trace.info)},
            })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _plain(info: dict) -> dict:
    return {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool)) or v is None}
