"""StepCostShares: decodes pay a decode's cost, prefill chunks the rest by their tokens."""
from __future__ import annotations

from hypothesis import given, strategies as st

from scheduler.host_charge import StepCostShares


def test_decode_only_steps_share_equally_and_teach_the_estimate() -> None:
    shares = StepCostShares(smoothing=0.5)
    assert shares.split([1, 1, 1, 1], 4_000, 8_000) == [(1_000, 2_000)] * 4
    assert shares.per_decode == (1_000, 2_000)
    shares.split([1, 1], 4_000, 4_000)  # 2,000 / 2,000 a decode: halfway there
    assert shares.per_decode == (1_500, 2_000)


def test_a_prefill_chunk_pays_what_it_adds_not_its_neighbours_decodes() -> None:
    shares = StepCostShares()
    shares.split([1] * 8, 80_000, 80_000)  # 10 us a decode
    # 7 decodes beside a 256-token chunk; the step cost 250 us: the chunk added 180 us.
    split = shares.split([1, 1, 1, 256, 1, 1, 1, 1], 250_000, 300_000)
    assert split[3] == (180_000, 230_000)
    assert all(s == (10_000, 10_000) for i, s in enumerate(split) if i != 3)


def test_prefill_chunks_share_the_rest_by_their_tokens() -> None:
    shares = StepCostShares()
    shares.split([1, 1], 20_000, 20_000)
    split = shares.split([300, 1, 100], 100_000, 100_000)
    assert split == [(67_500, 67_500), (10_000, 10_000), (22_500, 22_500)]


def test_without_an_estimate_or_decodes_the_cost_goes_by_tokens() -> None:
    assert StepCostShares().split([3, 1], 4_000, 400) == [(3_000, 300), (1_000, 100)]
    shares = StepCostShares()
    shares.split([1], 5_000, 5_000)
    assert shares.split([2, 6], 800, 800) == [(200, 200), (600, 600)]
    assert shares.split([], 800, 800) == []


def test_decodes_never_pay_more_than_the_call_cost() -> None:
    shares = StepCostShares()
    shares.split([1, 1], 100_000, 100_000)  # 50 us a decode, then a cheap mixed call
    split = shares.split([1, 1, 64], 30_000, 30_000)
    assert split == [(15_000, 15_000), (15_000, 15_000), (0, 0)]


@given(st.lists(st.integers(1, 2048), min_size=1, max_size=64), st.integers(0, 10**7), st.integers(0, 10**7),
       st.lists(st.integers(1, 10**6), max_size=4))
def test_shares_are_never_negative_and_never_exceed_the_cost(counts: list[int], cpu_ns: int, wall_ns: int,
                                                             warmup: list[int]) -> None:
    shares = StepCostShares()
    for cost in warmup:
        shares.split([1, 1, 1], cost, cost)
    split = shares.split(counts, cpu_ns, wall_ns)
    assert len(split) == len(counts)
    assert all(c >= 0 and w >= 0 for c, w in split)
    assert sum(c for c, _ in split) <= cpu_ns and sum(w for _, w in split) <= wall_ns
    # Nothing is lost but the rounding: at most one ns per share.
    assert cpu_ns - sum(c for c, _ in split) <= len(counts) + 1
