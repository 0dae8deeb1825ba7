"""KVManager: a request's block table against the pool: grow, admit with prefix hits, free, cache.

The scheduler decides *who* runs; this class owns *which blocks* they hold. Every block a request
holds is one reference in the pool, taken here and given back here exactly once.

A request's `block_ids` list is only ever extended in place (`grow`) or replaced by a new list
(`admit`, `free`): never shrunk or rewritten. That is what lets a ScheduledChunk share it as its
block table instead of copying it every step (the GPU thread may read it while the next step is
prepared): the entries a chunk covers never change under it.
"""
from __future__ import annotations

from scheduler.block_pool import BlockPool
from scheduler.config import SchedulerConfig
from scheduler.prefix_cache import extend_block_hashes, find_cached_prefix
from scheduler.request_state import RequestState


class KVManager:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.block_size = config.block_size
        self.enable_caching = config.enable_prefix_caching
        self.pool = BlockPool(config.num_blocks, config.block_size, config.enable_prefix_caching)
        self.num_hit_queries = 0  # prompt tokens looked up at first admission
        self.num_hit_tokens = 0  # of those, served from the cache

    def update_hashes(self, req: RequestState) -> None:
        """Hash the request's new full blocks. A request asking for prompt logprobs gets none: it
        never hits the cache (or the tiers below it), since every prompt position it scores must
        be computed (vLLM skips the cache for it too), and its blocks are not shared either."""
        if self.enable_caching and req.params.prompt_logprobs is None:
            extend_block_hashes(
                req.block_hashes, req.all_token_ids, self.block_size, req.request.cache_salt)

    # -- admission ---------------------------------------------------------------------------
    def find_prefix(self, req: RequestState) -> list[int]:
        """Cached blocks a request holding nothing could start from (empty when caching is off)."""
        if not self.enable_caching or req.block_ids:
            return []
        return find_cached_prefix(self.pool, req.block_hashes, req.num_tokens)

    def can_admit(self, hits: list[int], num_total_tokens: int) -> bool:
        """Whether a request starting from `hits` can hold `num_total_tokens` positions. A hit on a
        cached (ref 0) block takes it out of the evictable set, so it does not count as room."""
        num_new = self.config.blocks_for(num_total_tokens) - len(hits)
        num_hits_idle = sum(self.pool.ref_counts[b] == 0 for b in hits)
        return num_new <= self.pool.num_allocatable - num_hits_idle

    def admit(self, req: RequestState, hits: list[int], num_total_tokens: int) -> None:
        assert not req.block_ids and req.num_computed_tokens == 0
        self.pool.touch(hits)
        req.block_ids = list(hits)
        req.num_hashed_blocks = len(hits)
        req.num_computed_tokens = len(hits) * self.block_size
        if not req.was_scheduled:  # usage reports the first admission's hit, not a recompute's
            req.num_cached_tokens = req.num_computed_tokens
            self.num_hit_queries += req.num_prompt_tokens
            self.num_hit_tokens += req.num_computed_tokens
        ok = self.grow(req, num_total_tokens)
        assert ok, "admit() without can_admit()"

    # -- growth / release --------------------------------------------------------------------
    def grow(self, req: RequestState, num_total_tokens: int) -> bool:
        """Extend the block table to cover `num_total_tokens` positions; False (no change) if short."""
        num_new = self.config.blocks_for(num_total_tokens) - len(req.block_ids)
        if num_new <= 0:
            return True
        new_ids = self.pool.allocate(num_new)
        if new_ids is None:
            return False
        req.block_ids.extend(new_ids)
        return True

    def truncate(self, req: RequestState, num_total_tokens: int) -> int:
        """Give back the blocks past those covering `num_total_tokens` positions (those of a row's
        rejected guesses) -> how many. The table is replaced, not shrunk in place (see
        the module's note); the blocks given back were never complete, so none is cached."""
        num_keep = self.config.blocks_for(num_total_tokens)
        extra = req.block_ids[num_keep:]
        if extra:
            assert req.num_hashed_blocks <= num_keep, req
            self.pool.free(reversed(extra))
            req.block_ids = req.block_ids[:num_keep]
        return len(extra)

    def free(self, req: RequestState) -> None:
        """Give back every block the request holds, last block first: in the cached LRU a chain's
        tail is then evicted before its head, which other prompts are likelier to share."""
        self.pool.free(reversed(req.block_ids))
        req.block_ids = []
        req.num_hashed_blocks = 0

    def cache_computed(self, req: RequestState) -> None:
        """Register the request's fully computed blocks in the prefix cache. Called after a step
        succeeded, so a cached block always holds KV that was actually written."""
        if not self.enable_caching:
            return
        num_full = min(req.num_computed_tokens // self.block_size, len(req.block_hashes))
        first = req.num_hashed_blocks
        if num_full > first:
            self.pool.cache_blocks(req.block_ids[first:num_full], req.block_hashes[first:num_full])
            req.num_hashed_blocks = num_full
