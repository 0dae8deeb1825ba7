"""KvEventLog against a real BlockPool: a finished prompt whose blocks are cached is published as
`stored` in the router's key (the same hashes router/request_key.py computes), only as far as the
cache's leading run goes; evicting a token block publishes `removed` for the text block over it;
a router of another epoch or too far behind gets `all_cleared` and a snapshot; nothing is kept for
routers until one asks, and what waits is bounded. With a host tier, a block the device evicts into
it is `offloaded` (still a hit), and `removed` only when no tier holds it."""
from __future__ import annotations

import orjson

from pipeline.kv_event_log import attach_kv_event_log, prompt_blocks
from router.request_key import chained_block_hashes, routed_request
from scheduler.block_pool import BlockPool
from scheduler.prefix_cache import extend_block_hashes

BLOCK = 4  # tokens per KV block
TEXT = "".join(chr(ord("a") + i % 26) for i in range(256))  # 4 router blocks of 64 bytes
BODY = orjson.dumps({"model": "m", "prompt": TEXT})
TOKENS = list(range(100, 164))  # 64 tokens: 4 characters each, 16 KV blocks


def cache_prompt(pool: BlockPool, tokens: list[int], num_blocks: int) -> list[int]:
    """The prompt's first `num_blocks` blocks computed, cached and released (as a finished request leaves them)."""
    hashes: list[bytes] = []
    extend_block_hashes(hashes, tokens, BLOCK)
    ids = pool.allocate(num_blocks)
    pool.cache_blocks(ids, hashes[:num_blocks])
    pool.free(reversed(ids))
    return ids


def subscribed_log(pool: BlockPool, **kw):
    log = attach_kv_event_log(pool, BLOCK)
    first = log.read(None, 0)  # a router's first ask: start over, nothing held
    assert first == [(0, "all_cleared", ()), (0, "stored", ())] and log.subscribed
    return log


def test_the_router_key_is_the_routers_own() -> None:
    hashes, num_bytes = prompt_blocks(BODY)
    assert hashes == routed_request(BODY).block_hashes == chained_block_hashes(TEXT) and num_bytes == 256
    assert prompt_blocks(b"not json") == ((), 0) and prompt_blocks(b"[1, 2]") == ((), 0)


def test_a_finished_prompt_is_stored_as_far_as_the_cache_holds_it_then_removed_when_evicted() -> None:
    pool = BlockPool(40, BLOCK, enable_caching=True)
    log = subscribed_log(pool)
    text_hashes = chained_block_hashes(TEXT)
    cache_prompt(pool, TOKENS, 10)  # 40 of 64 tokens cached: text blocks 0 and 1 (tokens up to 16, 32)
    log.admitted("r1", BODY, TOKENS, None)
    assert log.read(log.epoch, 0) == []  # not finished yet: nothing to say
    log.finished("r1")
    assert log.read(log.epoch, 0) == [(1, "stored", text_hashes[:2])]
    # the same prompt again, now wholly cached: only the blocks not published before
    cache_prompt(pool, TOKENS, 16)
    log.admitted("r2", BODY, TOKENS, None)
    log.finished("r2")
    assert log.read(log.epoch, 1) == [(2, "stored", text_hashes[2:])]
    # fill the pool with other blocks: every cached block is evicted, each text block removed once
    pool.allocate(pool.num_allocatable)
    removed = [h for seq, kind, hashes in log.read(log.epoch, 2) if kind == "removed" for h in hashes]
    assert sorted(removed) == sorted(text_hashes) and log.read(log.epoch, log.seq) == []
    pool.check()


def test_another_epoch_or_a_place_older_than_the_kept_events_gets_a_snapshot() -> None:
    pool = BlockPool(40, BLOCK, enable_caching=True)
    log = subscribed_log(pool)
    log.events = type(log.events)(maxlen=1)
    cache_prompt(pool, TOKENS, 16)
    log.admitted("r1", BODY, TOKENS, None)
    log.finished("r1")
    log.read(log.epoch, 0)
    log.evicted(b"no such block")  # nothing tied to it: no event
    assert log.seq == 1
    held = set(chained_block_hashes(TEXT))
    for epoch, after in (("old-epoch", 1), (log.epoch, 5)):  # a restarted replica; a place never reached
        cleared, snapshot = log.read(epoch, after)
        assert cleared == (1, "all_cleared", ()) and snapshot[1] == "stored" and set(snapshot[2]) == held
    # with one event kept, a router at 0 still reaches event 1
    assert log.read(log.epoch, 0) == [(1, "stored", tuple(chained_block_hashes(TEXT)))]
    log._emit("removed", ())
    assert log.read(log.epoch, 0)[0][1] == "all_cleared"  # event 1 is gone: start over


def test_what_waits_for_a_router_is_bounded() -> None:
    pool = BlockPool(8, BLOCK, enable_caching=True)
    log = attach_kv_event_log(pool, BLOCK)
    log.max_unread = 3
    for i in range(10):  # requests that never finish (their abort lost): the oldest are forgotten
        log.admitted(f"r{i}", BODY, TOKENS, None)
    assert list(log._admitted) == ["r7", "r8", "r9"]
    log.finished("r0")  # forgotten: nothing
    assert len(log._finished) == 0


def test_each_ask_publishes_within_its_time_and_leaves_the_rest_for_the_next() -> None:
    pool = BlockPool(40, BLOCK, enable_caching=True)
    log = subscribed_log(pool)
    cache_prompt(pool, TOKENS, 16)
    log.max_publish_s = 0.0  # no time: nothing is published, nothing is lost
    for i in range(3):
        log.admitted(f"r{i}", BODY, TOKENS, None)
        log.finished(f"r{i}")
    assert log.read(log.epoch, 0) == [] and len(log._finished) == 3
    log.max_publish_s = 1.0
    assert [kind for _, kind, _ in log.read(log.epoch, 0)] == ["stored"] and not log._finished


def test_with_a_host_tier_an_evicted_block_is_offloaded_then_removed_with_the_host_copy() -> None:
    from scheduler.kv_tiers.host_index import HostIndex

    pool, host = BlockPool(40, BLOCK, enable_caching=True), HostIndex(16)

    def offload(block_id: int, block_hash: bytes) -> None:  # the tiers' hook: device eviction -> host slot
        if block_hash not in host:
            slot, _ = host.insert(block_hash)
            host.mark_ready(slot)
            host.unpin(slot)

    pool.on_evict = offload
    log = attach_kv_event_log(pool, BLOCK, host)
    log.read(None, 0)
    text_hashes = chained_block_hashes(TEXT)
    cache_prompt(pool, TOKENS, 16)
    log.admitted("r1", BODY, TOKENS, None)
    log.finished("r1")
    assert log.read(log.epoch, 0) == [(1, "stored", text_hashes)]
    taken = pool.allocate(pool.num_allocatable)  # every cached block leaves the device, into the host tier
    events = log.read(log.epoch, 1)
    offloaded = [h for _, kind, hs in events if kind == "offloaded" for h in hs]
    assert sorted(offloaded) == sorted(text_hashes) and {kind for _, kind, _ in events} == {"offloaded"}
    # a router that starts over sees them as held in the host tier
    snapshot = log.read("another-epoch", 0)
    assert [kind for _, kind, _ in snapshot] == ["all_cleared", "stored", "offloaded"]
    assert snapshot[1][2] == () and set(snapshot[2][2]) == set(text_hashes)
    # fetched back and finished again: on the device once more
    pool.free(reversed(taken))
    seq = log.seq
    cache_prompt(pool, TOKENS, 16)
    log.admitted("r2", BODY, TOKENS, None)
    log.finished("r2")
    assert log.read(log.epoch, seq) == [(seq + 1, "stored", text_hashes)]
    # the host tier drops them while the device holds them: still held; then the device evicts them
    # too (no host copy now): removed
    for h in host.lru_order():
        host.remove(h)
    assert log.seq == seq + 1
    pool.on_evict = lambda block_id, block_hash: log.evicted(block_hash)  # no offload: the host tier stays empty
    pool.allocate(pool.num_allocatable)
    removed = [h for _, kind, hs in log.read(log.epoch, seq + 1) if kind == "removed" for h in hs]
    assert sorted(removed) == sorted(text_hashes)
