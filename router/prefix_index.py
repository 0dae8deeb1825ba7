"""PrefixIndex: which replicas hold each prompt block, a soft mirror of their prefix caches.

A replica caches the blocks of every prompt it serves, so the router remembers, per chained block
hash (router/request_key.py), the replicas it routed that block to; the replicas' own block events
(router/kv_event_feed.py) add what others sent them and take out what they evicted. The longest run of leading
blocks a replica holds estimates its prefix-cache hit. Bounded: least recently used hashes go first,
as a replica's LRU evicts its blocks first. A replica that went down (its cache is gone with it) is
forgotten by bumping its epoch, in O(1); entries of older epochs are ignored.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixIndex:
    def __init__(self, max_blocks: int = 200_000) -> None:
        self.max_blocks = max_blocks
        self._holders: OrderedDict[bytes, dict[int, int]] = OrderedDict()  # hash -> {replica: epoch}
        self._epochs: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._holders)

    def record(self, replica: int, block_hashes: Sequence[bytes]) -> None:
        epoch = self._epochs.get(replica, 0)
        holders = self._holders
        for h in block_hashes:
            entry = holders.get(h)
            if entry is None:
                holders[h] = {replica: epoch}
            else:
                entry[replica] = epoch
                holders.move_to_end(h)
        while len(holders) > self.max_blocks:
            holders.popitem(last=False)

    def num_cached_blocks(self, replica: int, block_hashes: Sequence[bytes]) -> int:
        """Leading blocks of `block_hashes` that `replica` holds (as far as this router knows)."""
        epoch = self._epochs.get(replica, 0)
        n = 0
        for h in block_hashes:
            entry = self._holders.get(h)
            if entry is None or entry.get(replica) != epoch:
                break
            n += 1
        return n

    def remove(self, replica: int, block_hashes: Sequence[bytes]) -> None:
        """`replica` no longer holds these blocks (it evicted them)."""
        epoch = self._epochs.get(replica, 0)
        holders = self._holders
        for h in block_hashes:
            entry = holders.get(h)
            if entry is not None and entry.get(replica) == epoch:
                del entry[replica]
                if not entry:
                    del holders[h]

    def forget(self, replica: int) -> None:
        self._epochs[replica] = self._epochs.get(replica, 0) + 1
