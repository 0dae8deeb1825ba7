"""Hypothesis state machine over the BlockPool: random allocate / free (abort) / share prefix /
cache / evict, against a list model of the free list and the LRU. check() after every rule."""
from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from scheduler.block_pool import BlockPool

NUM_BLOCKS = 9


class PoolMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(NUM_BLOCKS, block_size=4, enable_caching=True)
        self.owners: list[list[int]] = []  # each: one request's block table
        self.model_free = list(range(1, NUM_BLOCKS))  # next allocated first
        self.model_cached: list[int] = []  # next evicted first
        self.hashes: dict[int, bytes] = {}  # block -> hash, model side
        self.next_hash = 0

    def _model_allocate(self, n: int) -> list[int] | None:
        if n > len(self.model_free) + len(self.model_cached):
            return None
        out = []
        for _ in range(n):
            if self.model_free:
                out.append(self.model_free.pop(0))
            else:
                b = self.model_cached.pop(0)
                del self.hashes[b]  # evicted: in LRU order, never a used block
                out.append(b)
        return out

    @rule(n=st.integers(0, 5))
    def allocate(self, n: int) -> None:
        expected = self._model_allocate(n)
        got = self.pool.allocate(n)
        assert got == expected
        if got is not None:
            self.owners.append(got)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 100), n=st.integers(1, 3))
    def grow(self, i: int, n: int) -> None:
        owner = self.owners[i % len(self.owners)]
        expected = self._model_allocate(n)
        got = self.pool.allocate(n)
        assert got == expected
        if got is not None:
            owner.extend(got)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 100))
    def free_owner(self, i: int) -> None:  # finish or abort: the whole table, last block first
        owner = self.owners.pop(i % len(self.owners))
        self.pool.free(reversed(owner))
        for b in reversed(owner):
            if self.pool.ref_counts[b] == 0:
                (self.model_cached if b in self.hashes else self.model_free).append(b)

    @precondition(lambda self: self.owners)
    @rule(i=st.integers(0, 100), j=st.integers(0, 100))
    def cache_one(self, i: int, j: int) -> None:
        owner = self.owners[i % len(self.owners)]
        if not owner:
            return
        b = owner[j % len(owner)]
        if b in self.hashes:
            return
        self.next_hash += 1
        digest = self.next_hash.to_bytes(32, "little")
        assert self.pool.cache_block(b, digest)
        self.hashes[b] = digest

    @precondition(lambda self: self.hashes)
    @rule(k=st.integers(0, 100))
    def share_prefix(self, k: int) -> None:  # a new request hits a cached or used hashed block
        digest = sorted(self.hashes.values())[k % len(self.hashes)]
        b = self.pool.lookup(digest)
        assert b is not None and self.hashes[b] == digest
        if self.pool.ref_counts[b] == 0:
            self.model_cached.remove(b)
        self.pool.touch([b])
        self.owners.append([b])

    @invariant()
    def consistent(self) -> None:
        self.pool.check()
        assert self.pool.free_order() == self.model_free
        assert self.pool.cached_lru_order() == self.model_cached
        held = sorted(b for owner in self.owners for b in owner)
        refs = sorted(b for b, r in enumerate(self.pool.ref_counts) for _ in range(r))
        assert held == refs
        if not self.owners:
            assert self.pool.num_used == 0


PoolMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestPoolMachine = PoolMachine.TestCase
