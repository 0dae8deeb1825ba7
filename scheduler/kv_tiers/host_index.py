"""HostIndex: which block hash each slot of the host-memory tier holds, in LRU order.

A slot is in one of three states:
  filling  a device -> host copy (or a disk -> host read) into it is in flight;
  ready    it holds the block's bytes;
and it may be *pinned* (a count): an in-flight copy reads or writes it, so it must not be reused.
A filling slot is always pinned. Eviction takes the least recently used unpinned slot; a block
that is only filling may still be the source of a host -> device load planned in a later or the
same batch, because the GPU stage runs a batch's offloads before its loads, in order, on one stream.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

FILLING = "filling"
READY = "ready"


class HostIndex:
    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._free: list[int] = list(range(num_slots - 1, -1, -1))  # pop() gives slot 0 first
        self._slot_of: OrderedDict[bytes, int] = OrderedDict()  # head = least recently used
        self._hash_of: dict[int, bytes] = {}
        self.state: dict[int, str] = {}
        self.pins: dict[int, int] = {}
        self.on_evict: Callable[[bytes], None] | None = None  # told of each block that leaves (routers' events)

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, block_hash: bytes) -> bool:
        return block_hash in self._slot_of

    def lookup(self, block_hash: bytes) -> int | None:
        return self._slot_of.get(block_hash)

    def is_ready(self, slot: int) -> bool:
        return self.state.get(slot) == READY

    def touch(self, block_hash: bytes) -> None:
        self._slot_of.move_to_end(block_hash)

    def insert(self, block_hash: bytes) -> tuple[int, bytes | None] | None:
        """A slot for a new block, filling and pinned once, at the MRU end; and the hash evicted
        to make room (or None). None when every slot is pinned."""
        assert block_hash not in self._slot_of, "block already in the host tier"
        evicted: bytes | None = None
        if self._free:
            slot = self._free.pop()
        else:
            victim = next((h for h, s in self._slot_of.items() if not self.pins.get(s)), None)
            if victim is None:
                return None
            slot = self._slot_of.pop(victim)
            del self._hash_of[slot]
            evicted = victim
            if self.on_evict is not None:
                self.on_evict(victim)
        self._slot_of[block_hash] = slot
        self._hash_of[slot] = block_hash
        self.state[slot] = FILLING
        self.pins[slot] = 1
        return slot, evicted

    def mark_ready(self, slot: int) -> None:
        assert self.state.get(slot) == FILLING, f"slot {slot} is not filling"
        self.state[slot] = READY

    def remove(self, block_hash: bytes) -> None:
        """Forget a block (a failed read): its slot is free once unpinned."""
        slot = self._slot_of.pop(block_hash)
        del self._hash_of[slot]
        if self.on_evict is not None:
            self.on_evict(block_hash)
        self.state[slot] = READY
        if not self.pins.get(slot):
            self._release_slot(slot)

    def pin(self, slot: int) -> None:
        self.pins[slot] = self.pins.get(slot, 0) + 1

    def unpin(self, slot: int) -> None:
        assert self.pins.get(slot, 0) > 0, f"unpinning slot {slot} that is not pinned"
        self.pins[slot] -= 1
        if self.pins[slot] == 0:
            del self.pins[slot]
            if slot not in self._hash_of:  # removed while pinned
                self._release_slot(slot)

    def _release_slot(self, slot: int) -> None:
        self.state.pop(slot, None)
        self._free.append(slot)

    def lru_order(self) -> list[bytes]:
        """Hashes, next evicted first (pinned ones are skipped by eviction, not by this list)."""
        return list(self._slot_of)

    @property
    def num_pinned(self) -> int:
        return len(self.pins)

    def check(self) -> None:
        assert len(self._slot_of) == len(self._hash_of)
        for block_hash, slot in self._slot_of.items():
            assert self._hash_of[slot] == block_hash
            assert slot not in self._free
            if self.state[slot] == FILLING:
                assert self.pins.get(slot, 0) > 0, f"filling slot {slot} is not pinned"
        assert len(set(self._free)) == len(self._free)
        held = set(self._hash_of) | set(self.pins)
        assert not (held & set(self._free))
        assert len(held) + len(self._free) == self.num_slots, (len(held), len(self._free), self.num_slots)
        assert all(n > 0 for n in self.pins.values())
