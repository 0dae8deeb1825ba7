"""NoTiers: the KV tiers when they are off (no `--kv-host-gb`, no `--kv-disk-path`).

It has KvTierManager's interface and does nothing: nothing is below the device pool, so there is
nothing to fetch or wait for, no copy rides a batch and no disk job is queued. The scheduler, its
stage and the metrics then call the tiers unconditionally instead of asking whether there are any;
`enabled` says which it is where that matters (the decode fast path, the /metrics families).
"""
from __future__ import annotations

from typing import Iterable

from scheduler.request_state import RequestState
from stages.messages import KvDiskDone, KvDiskRequest, KvTransferOps


class NoTiers:
    enabled = False
    disk_requests: tuple[KvDiskRequest, ...] = ()  # never any (a tuple: nobody appends to it)

    def prefetch(self, req: RequestState, device_hits: list[int]) -> bool:
        return False  # nothing below the device: the device hits are the whole prefix found

    def has_news(self, req: RequestState) -> bool:
        return False

    def must_wait(self, req: RequestState, num_device_hits: int, num_busy: int) -> bool:
        return False

    def release(self, req: RequestState) -> None:
        pass

    def take_ops(self, step_id: int) -> KvTransferOps | None:
        return None

    def take_early_ops(self, next_step_id: int) -> KvTransferOps | None:
        return None

    def mark_dirty(self, block_ids: Iterable[int], until_step: int) -> None:
        pass  # no load will ever target a block: nothing to order after the steps in flight

    def on_step_done(self, step_id: int) -> None:
        pass

    def observe_step(self, num_tokens: int, duration_s: float) -> None:
        pass

    def on_disk_done(self, done: KvDiskDone, now_ns: int | None = None) -> None:
        # Without tiers there is no disk stage to send one: reaching here is a wiring fault.
        raise AssertionError(f"a disk result ({done.kind}) with the KV tiers off")

    def take_disk_requests(self) -> list[KvDiskRequest]:
        return []

    def check(self) -> None:
        pass
