"""PenaltyCache: penalties from the device-side histories equal those from the id lists
(apply_penalties), step after step as sampled ids are added; slots are reused clean and
survive the pools' growth."""
from __future__ import annotations

import torch

from gpu_stage.sampling.penalties import INITIAL_SLOTS, PenaltyCache, apply_penalties
from gpu_stage.sampling.rows import SamplingRow, SamplingTensors
from gpu_stage.sampling.sampler import Sampler
from stages.sampling import SamplingParams

VOCAB = 50


def _rows(cache: PenaltyCache, specs: dict[str, dict], histories: dict[str, tuple[list[int], list[int]]]
          ) -> list[SamplingRow]:
    rows = []
    for rid, params in specs.items():
        p = SamplingParams(**params)
        prompt, output = histories[rid]
        slot = cache.slot(rid, prompt, output) if p.needs_penalties else 0
        rows.append(SamplingRow(p, prompt, output, None, slot))
    return rows


def test_cached_histories_give_the_list_penalties_step_after_step() -> None:
    gen = torch.Generator().manual_seed(1)
    specs = {
        "rep": {"temperature": 0.0, "repetition_penalty": 1.7},
        "plain": {"temperature": 0.0},
        "freq": {"temperature": 0.0, "frequency_penalty": 0.8, "presence_penalty": -0.5},
        "all": {"temperature": 0.0, "repetition_penalty": 0.6, "frequency_penalty": -0.3, "presence_penalty": 1.2},
    }
    # The prompt holds ids outside the vocabulary (ignored by both) and the "all" request has
    # outputs before its first penalised step (a slot filled mid-way).
    histories = {rid: (torch.randint(0, VOCAB, (12,), generator=gen).tolist() + [VOCAB + 3, -1], [])
                 for rid in specs}
    histories["all"][1].extend([4, 4, 9])
    cache = PenaltyCache(VOCAB, "cpu")
    for _ in range(6):
        rows = _rows(cache, specs, histories)
        t = SamplingTensors.build(rows, torch.device("cpu"), VOCAB)
        logits = torch.randn(len(rows), VOCAB, generator=gen) * 3
        assert torch.equal(cache.apply(logits, t), apply_penalties(logits, rows))
        sampled = torch.randint(0, VOCAB, (len(rows),), generator=gen, dtype=torch.int32)
        cache.advance(t.penalty_slot, sampled)
        for row, token in zip(rows, sampled.tolist()):
            row.output_token_ids.append(token)
    assert cache.num_slots_in_use == 3  # "plain" never took one


def test_sampler_reads_the_cache_for_rows_with_a_slot() -> None:
    cache = PenaltyCache(VOCAB, "cpu")
    logits = torch.zeros(1, VOCAB)
    logits[0, 7] = 1.0  # the argmax, until its output count penalises it
    params = SamplingParams(temperature=0.0, frequency_penalty=2.0)
    row = SamplingRow(params, [], [], None, cache.slot("a", [], []))
    t = SamplingTensors.build([row], torch.device("cpu"), VOCAB)
    sampler = Sampler(penalties=cache)
    assert sampler(logits, [row], t).token_ids == [7]
    cache.advance(t.penalty_slot, torch.tensor([7], dtype=torch.int32))  # the host list still lacks it
    assert sampler(logits, [row], t).token_ids == [0]


def test_released_slots_are_reused_clean_and_growth_keeps_the_others() -> None:
    cache = PenaltyCache(VOCAB, "cpu")
    first = cache.slot("a", [1, 2], [3])
    cache.advance(torch.tensor([first]), torch.tensor([5]))
    cache.release("a")
    assert cache.slot("b", [], []) == first  # the same slot, emptied
    assert not bool(cache.seen[first].any()) and not bool(cache.counts[first].any())
    slots = [cache.slot(f"r{i}", [i], [i, i]) for i in range(2 * INITIAL_SLOTS)]  # grows twice
    assert 0 not in slots and len(set(slots + [first])) == len(slots) + 1
    for i, slot in enumerate(slots):
        assert cache.seen[slot].nonzero().flatten().tolist() == [i]
        assert cache.counts[slot, i] == 2 and int(cache.counts[slot].sum()) == 2


def test_slots_sized_up_front_serve_without_growth_then_grow_past_them() -> None:
    cache = PenaltyCache(VOCAB, "cpu", initial_slots=5)  # slot 0 scratch, four for requests
    assert cache.counts.shape == (5, VOCAB) and cache.seen.shape == (5, VOCAB)
    pools = cache.counts.data_ptr()
    slots = [cache.slot(f"r{i}", [i], []) for i in range(4)]
    assert sorted(slots) == [1, 2, 3, 4] and cache.counts.data_ptr() == pools  # no new allocation
    extra = cache.slot("r4", [4], [])  # a fifth (a preempted request keeps its slot): the pools grow
    assert cache.counts.shape[0] == 10 and extra not in slots + [0]
    assert all(cache.seen[s].nonzero().flatten().tolist() == [i] for i, s in enumerate(slots + [extra]))
