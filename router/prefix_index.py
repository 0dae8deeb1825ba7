"""PrefixIndex: which replicas hold each prompt block, a soft mirror of their prefix caches.

A replica caches the blocks of every prompt it serves, so the router remembers, per chained block
hash (router/request_key.py), the replicas it routed that block to; the replicas' own block events
(router/kv_event_feed.py) add what others sent them and take out what they evicted. The longest run of leading
blocks a replica holds estimates its prefix-cache hit. Bounded: least recently used hashes go first,
as a replica's LRU evicts its blocks first. A replica that went down (its cache is gone with it) is
forgotten by bumping its epoch, in O(1); entries of older epochs are ignored.
A block a replica moved to its host-memory KV tier (an `offloaded` event) is still held, as a hit
that costs a restore instead of a recompute: such blocks are also kept per replica in `_on_host`,
which is empty (and costs nothing) for replicas without tiers.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixIndex:
    def __init__(self, max_blocks: int = 200_000) -> None:
        self.max_blocks = max_blocks
        self._holders: OrderedDict[bytes, dict[int, int]] = OrderedDict()  # hash -> {replica: epoch}
        self._epochs: dict[int, int] = {}
        self._on_host: dict[int, set[bytes]] = {}  # replica -> held blocks that are in its host tier only
        self._version = 0  # moved on by every change: what `held` remembers is good while it stands
        self._held: dict[int, tuple[Sequence[bytes], int, tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._holders)

    def record(self, replica: int, block_hashes: Sequence[bytes], on_host: bool = False) -> None:
        """`replica` holds these blocks: on its device (a dispatch, a `stored` event), or `on_host`."""
        self._version += 1
        epoch = self._epochs.get(replica, 0)
        holders = self._holders
        for h in block_hashes:
            entry = holders.get(h)
            if entry is None:
                holders[h] = {replica: epoch}
            else:
                entry[replica] = epoch
                holders.move_to_end(h)
        host = self._on_host.get(replica)
        if on_host:
            self._on_host.setdefault(replica, set()).update(block_hashes)
        elif host:
            host.difference_update(block_hashes)
        while len(holders) > self.max_blocks:
            h, entry = holders.popitem(last=False)
            for r in entry:
                if r in self._on_host:
                    self._on_host[r].discard(h)

    def held(self, replica: int, block_hashes: Sequence[bytes]) -> tuple[int, int]:
        """(`num_cached_blocks`, `num_host_blocks` of them): a policy's look-up, remembered (one per
        replica, until the index changes) so that the dispatch that follows it does not walk the
        prompt's blocks again. The memo holds `block_hashes` itself, so `is` cannot be fooled by a
        freed sequence's address."""
        memo = self._held.get(replica)
        if memo is not None and memo[0] is block_hashes and memo[1] == self._version:
            return memo[2]
        n = self.num_cached_blocks(replica, block_hashes)
        got = (n, self.num_host_blocks(replica, block_hashes, n))
        self._held[replica] = (block_hashes, self._version, got)
        return got

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

    def num_host_blocks(self, replica: int, block_hashes: Sequence[bytes], num_cached: int) -> int:
        """Of the first `num_cached` (held) blocks, those `replica` holds only in its host tier."""
        host = self._on_host.get(replica)
        if not host:
            return 0
        return sum(1 for h in block_hashes[:num_cached] if h in host)

    def remove(self, replica: int, block_hashes: Sequence[bytes]) -> None:
        """`replica` no longer holds these blocks (it evicted them)."""
        self._version += 1
        epoch = self._epochs.get(replica, 0)
        holders = self._holders
        for h in block_hashes:
            entry = holders.get(h)
            if entry is not None and entry.get(replica) == epoch:
                del entry[replica]
                if not entry:
                    del holders[h]
        if self._on_host.get(replica):
            self._on_host[replica].difference_update(block_hashes)

    def forget(self, replica: int) -> None:
        self._version += 1
        self._epochs[replica] = self._epochs.get(replica, 0) + 1
        self._on_host.pop(replica, None)
