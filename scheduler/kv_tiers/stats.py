"""TierStats: counters of the KV tiers for /metrics, and each request's tier record for its trace.

A request's record (`trace.info["kv_tiers"]`) says where its prefix blocks were found below the
device (`hit_blocks` by tier), when its fetches started and ended (host clock, ns), the bytes
fetched for it, and any wait-or-recompute decision at admission.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.request_state import RequestState


def _new_info() -> dict[str, object]:
    return {"hit_blocks": {"host": 0, "disk": 0}, "fetch_started_ns": None, "fetch_done_ns": None,
            "fetch_bytes": 0, "decision": None, "wait_started_ns": None, "wait_ns": 0}


@dataclass
class TierStats:
    hits: dict[str, int] = field(default_factory=lambda: {"host": 0, "disk": 0})
    bytes: dict[str, int] = field(default_factory=lambda: {"d2h": 0, "h2d": 0, "disk_read": 0, "disk_write": 0})
    evictions: dict[str, int] = field(default_factory=lambda: {"host": 0, "disk": 0})
    num_prefetch_waits: int = 0  # admissions deferred to wait for a fetch
    num_host_full_drops: int = 0  # evicted device blocks not offloaded: every host slot pinned
    num_disk_writes_skipped: int = 0  # too many writes in flight
    num_disk_write_errors: int = 0  # full disk, I/O error: the block just stays off disk
    num_disk_read_errors: int = 0  # corrupt, truncated or foreign files: recomputed
    num_loads_deferred: int = 0  # host hits left in host at arrival: no device room then
    infos: dict[str, dict[str, object]] = field(default_factory=dict)

    def track(self, req: RequestState) -> dict[str, object]:
        info = self.infos.get(req.request_id)
        if info is None:
            info = req.request.trace.info.setdefault("kv_tiers", _new_info())  # type: ignore[assignment]
            self.infos[req.request_id] = info  # type: ignore[assignment]
        return info  # type: ignore[return-value]

    def forget(self, request_id: str) -> None:
        self.infos.pop(request_id, None)

    def note_hit(self, req: RequestState, tier: str) -> None:
        self.hits[tier] += 1
        self.track(req)["hit_blocks"][tier] += 1  # type: ignore[index]

    def note_fetch(self, request_id: str, started_ns: int | None = None, done_ns: int | None = None,
                   num_bytes: int = 0) -> None:
        info = self.infos.get(request_id)
        if info is None:
            return
        if started_ns is not None and info["fetch_started_ns"] is None:
            info["fetch_started_ns"] = started_ns
        if done_ns is not None:
            info["fetch_done_ns"] = done_ns
        info["fetch_bytes"] += num_bytes  # type: ignore[operator]

    def note_decision(self, req: RequestState, decision: str, now_ns: int) -> None:
        info = self.track(req)
        info["decision"] = decision
        if decision == "wait" and info["wait_started_ns"] is None:
            info["wait_started_ns"] = now_ns
            self.num_prefetch_waits += 1

    def note_admitted(self, request_id: str, now_ns: int) -> None:
        info = self.infos.get(request_id)
        if info is not None and info["wait_started_ns"] is not None and not info["wait_ns"]:
            info["wait_ns"] = now_ns - info["wait_started_ns"]  # type: ignore[operator]
