"""CopyQueue: the tier copies queued for the next batch, and what each batch in flight settles.

KvTierManager decides what moves (it owns the host and disk indexes); this class only carries the
decided copies to a batch and back: the offloads and loads queued since the last batch, whether the
next batch must wait for them (a fence), what a batch's copies make ready or release once its step
is done, and which freed blocks a step in flight may still write (an early load into one of them
must wait for that step). It knows block ids, host slots and step ids, nothing of the tiers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from stages.messages import KvTransferOps


@dataclass(slots=True)
class StepCopies:
    """What the copies riding one batch settle when its step is done."""
    ready_slots: list[tuple[int, bytes]] = field(default_factory=list)  # offload targets: ready then
    load_slots: list[int] = field(default_factory=list)  # load sources: unpinned then
    load_infos: list[dict] = field(default_factory=list)  # trace records of the requests loaded for


class CopyQueue:
    def __init__(self) -> None:
        self._ops = KvTransferOps()
        self._next = StepCopies()  # what the queued copies settle, once they ride a batch
        self._in_flight: dict[int, StepCopies] = {}
        self.fence = False  # the next batch may overwrite a block whose offload is not done
        self._dirty: dict[int, int] = {}  # freed block -> last step in flight that may write it

    def offload(self, block_id: int, slot: int, block_hash: bytes) -> None:
        """Copy device block -> host slot; the slot holds `block_hash` once the step is done."""
        self._ops.offloads.append((block_id, slot))
        self._next.ready_slots.append((slot, block_hash))

    def load(self, slot: int, block_id: int) -> None:
        """Copy host slot -> device block; the caller's pin on the slot lasts until the step is done."""
        self._ops.loads.append((slot, block_id))
        self._next.load_slots.append(slot)

    def note_loaded_for(self, infos: Iterable[dict]) -> None:
        """Trace records to stamp with `fetch_done_ns` when the queued loads' step is done."""
        self._next.load_infos.extend(infos)

    def take_ops(self, step_id: int) -> KvTransferOps | None:
        """The copies queued since the last batch, to ride with batch `step_id` (also when there
        are none but the batch must wait for copies already running: a fence alone)."""
        if not self._ops and not self.fence:
            return None
        ops = self._take(step_id)
        ops.fence, self.fence = self.fence or bool(ops.loads), False
        return ops

    def take_early_ops(self, next_step_id: int) -> KvTransferOps | None:
        """Loads queued since the last batch (and the offloads before them), to start now, on
        their own, rather than with the next batch: they overlap the steps before the request's
        admission. They wait for the steps in flight only if a target block may still be
        written by one (`wait_compute`); the batches that admit requests wait for them. Their
        completion is reported with batch `next_step_id` (the next one built)."""
        if not self._ops.loads:
            return None
        ops = self._take(next_step_id)
        ops.fence = False
        ops.wait_compute = any(block in self._dirty for _, block in ops.loads)
        return ops

    def mark_dirty(self, block_ids: Iterable[int], until_step: int) -> None:
        """Blocks freed while step `until_step` (or one before it) may still write them: a load
        into one of them must wait for that step."""
        for block in block_ids:
            self._dirty[block] = max(until_step, self._dirty.get(block, -1))

    def _take(self, step_id: int) -> KvTransferOps:
        ops, self._ops = self._ops, KvTransferOps()
        pending, self._next = self._next, StepCopies()
        done = self._in_flight.setdefault(step_id, StepCopies())
        done.ready_slots += pending.ready_slots
        done.load_slots += pending.load_slots
        done.load_infos += pending.load_infos
        return ops

    def step_done(self, step_id: int) -> StepCopies | None:
        """Step `step_id` is done, and so are the copies that rode it: what they settle (None:
        none rode it). Its writes are over, so no block is dirty on its account any more."""
        if self._dirty:
            self._dirty = {b: s for b, s in self._dirty.items() if s > step_id}
        return self._in_flight.pop(step_id, None)
