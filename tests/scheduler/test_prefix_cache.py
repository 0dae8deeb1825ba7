"""Prefix cache: stable chained hashes, exact reused block ids, exact eviction order, salts, and a
fully cached prompt still computing its last block."""
from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.prefix_cache import extend_block_hashes, hash_block, root_hash
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepBatch, StepResult, TokenEvent
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

P = list(range(10, 18))  # two full blocks of 4


def make_req(rid: str, prompt: list[int], max_tokens: int = 1, salt: str | None = None) -> GenerateRequest:
    return GenerateRequest(rid, prompt, SamplingParams(max_tokens=max_tokens), RequestTrace(rid),
                           cache_salt=salt)


def make_sched(num_blocks: int = 32, caching: bool = True, **kw: object) -> Scheduler:
    """FCFS with plain admission unless a test asks otherwise: exact block ids and eviction order."""
    kw.setdefault("policy", "fcfs")
    kw.setdefault("shadow", False)
    return Scheduler(SchedulerConfig(num_blocks=num_blocks, block_size=4, enable_prefix_caching=caching,
                                     **kw))


def run_step(s: Scheduler) -> tuple[StepBatch, list[TokenEvent]]:
    batch = s.schedule()
    s.check()
    assert batch is not None
    sampled = [SampledToken(c.request_id, 7) for c in batch.chunks if c.sample]
    events = s.update(batch, StepResult(batch.step_id, sampled))
    s.check()
    return batch, events


def chunks(batch: StepBatch) -> list[tuple[str, int, int, list[int]]]:
    return [(c.request_id, c.start_pos, len(c.token_ids), c.block_table) for c in batch.chunks]


def test_hashes_are_stable_chained_and_salted() -> None:
    # Pinned: a later disk tier persists these keys, so the format must not drift silently.
    assert root_hash().hex() == "0d1a144326e544762e7c410b7050549913d27c061cdc0cb0cea6790c7b4c4367"
    assert hash_block(root_hash(), [1, 2, 3, 4]).hex() == (
        "d5e569f3b582d169ba9b2f2a1bf34e7eb0901f85e33bc5c7a831f69eab48d283")
    assert root_hash("a") != root_hash() != root_hash(None, namespace="model-x")
    assert root_hash("a") != root_hash("b")
    hashes: list[bytes] = []
    extend_block_hashes(hashes, [1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    assert len(hashes) == 2  # the partial third block is not hashed
    assert hashes[1] == hash_block(hashes[0], [5, 6, 7, 8])
    assert hashes[1] != hash_block(root_hash(), [5, 6, 7, 8])  # same block, other prefix
    extend_block_hashes(hashes, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4)
    assert len(hashes) == 3 and hashes[2] == hash_block(hashes[1], [9, 10, 11, 12])


def test_shared_prefix_reuses_exact_blocks_and_reports_cached_tokens() -> None:
    s = make_sched()
    s.add_request(make_req("a", P + [50, 51], max_tokens=2))
    b1, _ = run_step(s)
    assert chunks(b1) == [("a", 0, 10, [1, 2, 3])]
    s.add_request(make_req("b", P + [60], max_tokens=1))
    b2, e2 = run_step(s)
    # b starts at position 8 on a's first two blocks, shared while a still runs.
    assert chunks(b2) == [("a", 10, 1, [1, 2, 3]), ("b", 8, 1, [1, 2, 4])]
    assert [n.request_id for n in b2.new_requests] == ["b"]
    assert {e.request_id: e.num_cached_tokens for e in e2} == {"a": 0, "b": 8}
    # Both finished in that step: a freed [3, 2, 1], then b freed [4, 2, 1] (last block first).
    assert s.kv.pool.cached_lru_order() == [2, 1]
    assert s.kv.pool.free_order()[-2:] == [3, 4]
    s.add_request(make_req("c", P + [70, 71, 72, 73, 80]))
    b3, _ = run_step(s)
    assert chunks(b3) == [("c", 8, 5, [1, 2, 5, 6])]
    # c finished too and freed [6, 5, 2, 1]: its full blocks join the LRU, its partial 6 is free.
    assert s.kv.pool.cached_lru_order() == [5, 2, 1]
    assert s.kv.pool.free_order()[-1] == 6
    assert s.stats().prefix_hit_rate == (0 + 8 + 8) / (10 + 9 + 13)


def test_fully_cached_prompt_recomputes_its_last_block() -> None:
    s = make_sched()
    s.add_request(make_req("a", P))
    run_step(s)
    assert s.kv.pool.cached_lru_order() == [2, 1]
    s.add_request(make_req("b", P))
    b2, e2 = run_step(s)
    # Only block 1 is a hit: the last token must be computed to sample, and the cached block 2 is
    # not written in place; a fresh block (3, from the free list before any eviction) takes it.
    assert chunks(b2) == [("b", 4, 4, [1, 3])]
    assert b2.chunks[0].sample and b2.chunks[0].token_ids == P[4:]
    assert e2[0].token_ids == [7] and e2[0].num_cached_tokens == 4
    # b's block 3 holds the same content as block 2: the first holder keeps the key.
    assert s.kv.pool.lookup(s.kv.pool.block_hashes[2] or b"") == 2
    assert s.kv.pool.cached_lru_order() == [2, 1]


def test_eviction_is_lru_and_hits_survive_it() -> None:
    s = make_sched(num_blocks=6)  # 5 usable blocks
    a_prompt = list(range(10, 22))  # three full blocks
    s.add_request(make_req("a", a_prompt))
    assert chunks(run_step(s)[0]) == [("a", 0, 12, [1, 2, 3])]
    assert s.kv.pool.cached_lru_order() == [3, 2, 1] and s.kv.pool.free_order() == [4, 5]
    s.add_request(make_req("d", list(range(30, 42))))
    assert chunks(run_step(s)[0]) == [("d", 0, 12, [4, 5, 3])]  # free blocks first, then evict 3
    assert s.kv.pool.num_evictions == 1
    assert s.kv.pool.cached_lru_order() == [2, 1, 3, 5, 4]
    s.add_request(make_req("e", a_prompt + [99]))
    b3, _ = run_step(s)
    assert chunks(b3) == [("e", 8, 5, [1, 2, 3, 5])]  # a's blocks 1, 2 hit; evicts d's 3 then 5
    assert s.kv.pool.num_evictions == 3
    # e finished and freed [5, 3, 2, 1]: 5 held a partial block (plain free), the rest are cached.
    assert s.kv.pool.cached_lru_order() == [4, 3, 2, 1] and s.kv.pool.free_order() == [5]
    d_hashes: list[bytes] = []
    extend_block_hashes(d_hashes, list(range(30, 42)), 4)
    # d's table [4, 5, 3] was freed last block first, so its chain's tail went first: its head
    # block (still a usable prefix) survives.
    assert [s.kv.pool.lookup(x) for x in d_hashes] == [4, None, None]


def test_salt_separates_caches() -> None:
    s = make_sched()
    s.add_request(make_req("a", P + [1], salt="tenant-1"))
    run_step(s)
    s.add_request(make_req("b", P + [1]))
    assert chunks(run_step(s)[0])[0][1] == 0  # no salt: no hit on tenant-1's blocks
    s.add_request(make_req("c", P + [1], salt="tenant-2"))
    assert chunks(run_step(s)[0])[0][1] == 0
    s.add_request(make_req("d", P + [1], salt="tenant-1"))
    assert chunks(run_step(s)[0])[0][1] == 8


def test_caching_off_never_hits() -> None:
    s = make_sched(caching=False)
    for rid in "ab":
        s.add_request(make_req(rid, P + [1]))
        assert chunks(run_step(s)[0])[0][1] == 0
    assert s.kv.pool.num_cached == 0 and s.stats().prefix_hit_rate == 0.0


def test_preempted_request_resumes_from_its_own_cached_blocks() -> None:
    s = make_sched(num_blocks=6)  # 5 usable blocks; each request may need 3
    s.add_request(make_req("a", P, max_tokens=5))
    s.add_request(make_req("b", list(range(30, 38)), max_tokens=5))
    assert chunks(run_step(s)[0]) == [("a", 0, 8, [1, 2]), ("b", 0, 8, [3, 4])]
    assert chunks(run_step(s)[0]) == [("a", 8, 1, [1, 2, 5])]  # b preempted itself
    assert s.kv.pool.cached_lru_order() == [4, 3]  # its KV stays, cached
    for _ in range(3):  # b's hits would leave no room for its third block: it waits
        assert [c[0] for c in chunks(run_step(s)[0])] == ["a"]
    assert "a" not in s.requests and s.kv.pool.cached_lru_order() == [4, 3, 5, 2, 1]
    b6, e6 = run_step(s)
    # Recompute is only its first output token: positions 0-7 come back from the cache.
    assert chunks(b6) == [("b", 8, 1, [3, 4, 5])] and b6.new_requests == []
    assert b6.chunks[0].token_ids == [7] and e6[0].num_cached_tokens == 0
    assert s.kv.pool.num_evictions == 1


def test_extend_block_hashes_is_the_chain_of_hash_block_whatever_the_increments() -> None:
    tokens = [(i * 2654435761) % 70000 for i in range(200)]  # ids past 16 bits too
    expected, parent = [], root_hash("salt")
    for i in range(200 // 8):
        parent = hash_block(parent, tokens[i * 8:(i + 1) * 8])
        expected.append(parent)
    whole: list[bytes] = []
    extend_block_hashes(whole, tokens, 8, "salt")
    assert whole == expected
    piecewise: list[bytes] = []
    for n in (0, 7, 8, 9, 17, 64, 100, 200):
        extend_block_hashes(piecewise, tokens[:n], 8, "salt")
        assert piecewise == expected[:n // 8]


def test_root_hash_is_memoized_with_the_same_values():
    root_hash.cache_clear()
    first = [root_hash(), root_hash("a"), root_hash(None, namespace="model-x")]
    assert [root_hash(), root_hash("a"), root_hash(None, namespace="model-x")] == first
    assert root_hash.cache_info().hits == 3
    assert first[0].hex() == "0d1a144326e544762e7c410b7050549913d27c061cdc0cb0cea6790c7b4c4367"
