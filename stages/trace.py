"""RequestTrace: monotonic timestamps at every stage edge of one request's life.

Times are `time.perf_counter_ns()` values (monotonic, ns). A stage marks an edge with
`trace.mark("tokenized")`; the first mark of a name wins, so a retried edge keeps its first time.
Host-side work that belongs to this request alone (parse, tokenize, schedule decision, emit) is also
accumulated by category, so that host overhead can be told apart from waiting, on two clocks:
`host_ns` holds the work itself, `host_wall_ns` the wall time it spanned. Where the host shares
its cores with the model (a CPU server: the model's threads take every core), a stage's wall time
also counts the moments its thread waited for a core or for the interpreter lock while the model
ran, which is waiting for model steps, not the request's own work. So sections that run once per
step or per request (tokenize, add, schedule, a step's emit) read the thread's CPU clock for
`host_ns`; that read is a system call (~0.8 us), too dear per token, so the per-token SSE framing
and the parse (microseconds, on the event loop) are timed by the monotonic clock on both.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

host_clock_ns = time.perf_counter_ns
cpu_clock_ns = time.thread_time_ns  # this thread's CPU time: a system call, read per step, not per token

# The edges, in the order a request normally crosses them.
EDGES: tuple[str, ...] = (
    "received",
    "parsed",
    "tokenized",
    "queued",
    "reserved",
    "first_scheduled",
    "prefill_step_started",  # the step that completes the prompt: the GPU stage takes it up,
    "prefill_step_launched",  # has queued its work on the device,
    "prefill_step_synced",  # has its sampled ids on the host
    "prefill_done",
    "first_token_sampled",
    "first_token_written",
    "finished",
)


@dataclass(slots=True)
class RequestTrace:
    request_id: str
    marks_ns: dict[str, int] = field(default_factory=dict)
    host_ns: dict[str, int] = field(default_factory=dict)  # own work (CPU time where measured)
    info: dict[str, object] = field(default_factory=dict)
    last_write_ns: int = 0  # when the last output was handed to the transport (for ITL)
    host_wall_ns: dict[str, int] = field(default_factory=dict)  # the wall time host_ns's work spanned

    def mark(self, edge: str, at_ns: int | None = None) -> None:
        if edge not in self.marks_ns:
            self.marks_ns[edge] = time.perf_counter_ns() if at_ns is None else at_ns

    def add_host(self, category: str, work_ns: int, wall_ns: int | None = None) -> None:
        """Add host work: `work_ns` on the CPU (or the wall clock where that is all that was read),
        `wall_ns` the wall time it spanned (the same when not given)."""
        self.host_ns[category] = self.host_ns.get(category, 0) + work_ns
        wall = work_ns if wall_ns is None else wall_ns
        self.host_wall_ns[category] = self.host_wall_ns.get(category, 0) + wall

    def span_s(self, start: str, end: str) -> float | None:
        a, b = self.marks_ns.get(start), self.marks_ns.get(end)
        if a is None or b is None:
            return None
        return (b - a) / 1e9

    def stage_spans(self) -> list[tuple[str, int, int]]:
        """(edge, start_ns, end_ns) for each marked edge after the first: the time from the
        previous marked edge to this one (what a stage of the pipeline took for this request)."""
        spans = []
        prev = None
        for edge in EDGES:
            at = self.marks_ns.get(edge)
            if at is None:
                continue
            if prev is not None:
                spans.append((edge, prev, max(prev, at)))
            prev = at
        return spans

    def ttft_s(self) -> float | None:
        """Body complete to the first token's bytes handed to the transport."""
        return self.span_s("received", "first_token_written")

    def host_overhead_s(self) -> float:
        return sum(self.host_ns.values()) / 1e9

    def to_json(self) -> dict[str, object]:
        base = self.marks_ns.get("received")
        rel = {
            k: (None if base is None else round((v - base) / 1e6, 4)) for k, v in self.marks_ns.items()
        }
        info = self.info
        tiers = info.get("kv_tiers")
        if isinstance(tiers, dict) and base is not None:
            info = {**info, "kv_tiers": _times_in_ms(tiers, base)}
        return {
            "request_id": self.request_id,
            "edges_ms": rel,
            "host_ms": {k: round(v / 1e6, 4) for k, v in self.host_ns.items()},
            "host_wall_ms": {k: round(v / 1e6, 4) for k, v in self.host_wall_ns.items()},
            "info": info,
        }


def _times_in_ms(record: dict, base_ns: int) -> dict:
    """A record's `*_started_ns` / `*_done_ns` clock readings as ms since `base_ns`, its other
    `*_ns` durations as ms (the JSON a person reads next to `edges_ms`)."""
    out: dict = {}
    for key, value in record.items():
        if not key.endswith("_ns"):
            out[key] = value
        elif not isinstance(value, int):
            out[key[:-3] + "_ms"] = value  # not reached yet: None
        elif key.endswith(("_started_ns", "_done_ns")):
            out[key[:-3] + "_ms"] = round((value - base_ns) / 1e6, 4)
        else:
            out[key[:-3] + "_ms"] = round(value / 1e6, 4)
    return out
