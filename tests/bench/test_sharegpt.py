"""ShareGPT sampling as `vllm bench serve` does it, on the shipped sample (bench/data) and small files."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from bench.sharegpt import is_valid_sequence, load_conversations, sample_sharegpt
from bench.token_count import local_counter

SAMPLE = Path(__file__).resolve().parents[2] / "bench" / "data" / "sharegpt_sample.json"
COUNT = local_counter("dummy")  # one token per UTF-8 byte, plus BOS


def byte_len(text: str) -> int:
    return len(text.encode()) + 1


def write(tmp_path: Path, entries: object) -> Path:
    path = tmp_path / "data.json"
    path.write_text(json.dumps(entries))
    return path


def conv(human: str, gpt: str, cid: str = "x") -> dict:
    return {"id": cid, "conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": gpt}]}


def test_the_shipped_sample_is_sharegpt_shaped_and_varied():
    data = json.loads(SAMPLE.read_text())
    assert 50 <= len(data) <= 100 and len({e["id"] for e in data}) == len(data)
    two_turns = [e for e in data if len(e.get("conversations", [])) >= 2]
    assert all(t["from"] in ("human", "gpt") and isinstance(t["value"], str) for e in two_turns
               for t in e["conversations"])
    assert all(e["conversations"][0]["from"] == "human" for e in two_turns)
    prompt_lens = sorted(byte_len(e["conversations"][0]["value"]) for e in two_turns)
    reply_lens = sorted(byte_len(e["conversations"][1]["value"]) for e in two_turns)
    assert prompt_lens[0] < 4 and prompt_lens[-1] > 1024 and reply_lens[0] < 4 and reply_lens[-1] > 1000
    assert any(len(e["conversations"]) > 2 for e in data)


def test_loading_drops_short_entries_and_shuffles_as_python_random_does(tmp_path):
    entries = [conv(f"question {i}", f"answer {i}", str(i)) for i in range(6)]
    entries += [{"id": "one", "conversations": [{"from": "human", "value": "alone"}]}, {"id": "none"}, 7]
    path = write(tmp_path, entries)
    convs = load_conversations(path, seed=3)
    expected = [e["conversations"] for e in entries[:6]]
    state = random.getstate()
    random.seed(3)
    random.shuffle(expected)  # what vLLM's loader does with the global generator
    random.setstate(state)
    assert convs == expected
    assert load_conversations(path, seed=3, shuffle=False) == [e["conversations"] for e in entries[:6]]


def test_bad_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_conversations(tmp_path / "missing.json", 0)
    with pytest.raises(ValueError, match="JSON list"):
        load_conversations(write(tmp_path, {"conversations": []}), 0)


def test_validity_bounds_are_vllms():
    assert is_valid_sequence(4, 4) and is_valid_sequence(1024, 1024)
    assert not is_valid_sequence(3, 100) and not is_valid_sequence(100, 3)
    assert is_valid_sequence(100, 3, skip_min_output_len_check=True)
    assert not is_valid_sequence(1025, 10) and not is_valid_sequence(1000, 1049)


async def test_prompt_is_the_first_turn_output_length_the_second_turns_tokens(tmp_path):
    entries = [conv("What is two plus two?", "Four, of course."), conv("Hi", "Hello there, friend."),
               conv("Say no.", "No"), conv("x" * 1100, "too long a prompt"), conv("Tell me more.", "y" * 1200)]
    convs = load_conversations(write(tmp_path, entries), 0, shuffle=False)
    reqs = await sample_sharegpt(convs, 10, COUNT, oversample=False)
    assert [(r.prompt, r.prompt_len, r.max_tokens) for r in reqs] == [
        ("What is two plus two?", 22, 17), ("Tell me more.", 14, 1201)]
    # With an output length given, a short reply no longer disqualifies; the total still counts.
    fixed = await sample_sharegpt(convs, 10, COUNT, output_len=900, oversample=False)
    assert [(r.prompt, r.max_tokens) for r in fixed] == [
        ("What is two plus two?", 900), ("Say no.", 900), ("Tell me more.", 900)]
    with pytest.raises(ValueError, match="string 'value'"):
        await sample_sharegpt([[{"from": "human", "value": 5}, {"value": "x"}]], 1, COUNT)


async def test_the_sample_file_gives_its_usable_conversations_in_seeded_order():
    convs = load_conversations(SAMPLE, seed=0)
    assert len(convs) == 61  # 64 entries: one single turn, one empty, one without conversations
    usable = [c for c in convs if is_valid_sequence(byte_len(c[0]["value"]), byte_len(c[1]["value"]))]
    reqs = await sample_sharegpt(convs, 1000, COUNT, oversample=False)
    assert len(reqs) == len(usable) == 58  # "Ok" (3 tokens), "No" (a 3-token reply), the 1,468-token prompt
    assert [r.prompt for r in reqs] == [c[0]["value"] for c in usable]
    assert [r.max_tokens for r in reqs] == [byte_len(c[1]["value"]) for c in usable]
    assert [r.request_id for r in reqs] == [f"sharegpt-{i}" for i in range(58)]
    first = await sample_sharegpt(convs, 5, COUNT)
    assert [r.prompt for r in first] == [r.prompt for r in reqs[:5]]
    assert [r.prompt for r in await sample_sharegpt(load_conversations(SAMPLE, seed=1), 5, COUNT)] != \
        [r.prompt for r in first]


async def test_too_few_usable_conversations_are_drawn_again_unless_told_not_to():
    convs = load_conversations(SAMPLE, seed=0)
    reqs = await sample_sharegpt(convs, 100, COUNT, seed=0)
    assert len(reqs) == 100 and len({r.request_id for r in reqs}) == 100
    found = {r.prompt: r.max_tokens for r in reqs[:58]}
    assert all(found[r.prompt] == r.max_tokens for r in reqs[58:])  # copies of requests found
    again = await sample_sharegpt(convs, 100, COUNT, seed=0)
    assert [r.prompt for r in again] == [r.prompt for r in reqs]  # seeded
