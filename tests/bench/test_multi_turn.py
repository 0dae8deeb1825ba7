"""The conversation generator: same seed, same conversations; exact lengths; each prompt extends the last."""
from __future__ import annotations

import pytest

from bench.multi_turn import (MultiTurnSpec, TurnReply, make_conversations, next_request, opening_request,
                              suggested_num_kv_blocks, working_set_tokens)
from bench.workloads import WORDS, token_id_range


def all_prompts(spec: MultiTurnSpec, replies) -> list[list]:
    """Every conversation's requests, each turn fed the reply `replies(conversation, turn)`."""
    out = []
    for conv in make_conversations(spec):
        reqs = [opening_request(conv, spec)]
        for turn in range(1, spec.num_turns + 1):
            reqs.append(next_request(conv, spec, turn, reqs[-1], replies(conv.index, turn - 1)))
        out.append(reqs)
    return out


def no_ids(c: int, t: int) -> TurnReply:
    return TurnReply(f" reply{c}x{t}", None, 5)


def test_token_conversations_are_deterministic_and_grow_by_prompt_plus_reply():
    spec = MultiTurnSpec(num_conversations=5, num_turns=3, doc_len=40, turn_len=7, output_len=5, seed=3)
    convs = all_prompts(spec, no_ids)
    assert convs == all_prompts(spec, no_ids)
    assert convs != all_prompts(MultiTurnSpec(5, 3, 40, 7, 5, seed=4), no_ids)
    low, high = token_id_range(spec.vocab_size)
    by_conv = make_conversations(spec)
    for conv, reqs in zip(by_conv, convs):
        assert [r.request_id for r in reqs] == [f"conv-{conv.index}-turn-{t}" for t in range(4)]
        assert [len(r.prompt) for r in reqs] == [40, 52, 64, 76]  # + 5 reply stand-in + 7 user tokens
        assert [r.prompt_len for r in reqs] == [40, 52, 64, 76] and all(r.max_tokens == 5 for r in reqs)
        for t in range(1, 4):
            prev = reqs[t - 1].prompt
            # the previous prompt, the reply (a stand-in: the server sent no ids), the new user tokens
            assert reqs[t].prompt == prev + conv.stand_in_replies[t - 1] + list(conv.user_turns[t - 1])
        assert all(low <= x < high for x in reqs[-1].prompt)
    assert len({tuple(reqs[0].prompt[:8]) for reqs in convs}) == 5  # distinct documents


def test_token_prompts_use_the_reply_ids_when_the_server_sends_them():
    spec = MultiTurnSpec(num_conversations=1, num_turns=2, doc_len=8, turn_len=3, output_len=4)
    reqs = all_prompts(spec, lambda c, t: TurnReply("ignored", [900 + t] * 4, 4))[0]
    conv = make_conversations(spec)[0]
    assert reqs[1].prompt == reqs[0].prompt + [900] * 4 + conv.user_turns[0]
    assert reqs[2].prompt[:len(reqs[1].prompt) + 4] == reqs[1].prompt + [901] * 4


def test_text_conversations_append_the_reply_text():
    spec = MultiTurnSpec(num_conversations=3, num_turns=2, doc_len=20, turn_len=6, output_len=5, seed=1,
                         prompt_format="text")
    convs = all_prompts(spec, no_ids)
    assert convs == all_prompts(spec, no_ids)
    for c, reqs in enumerate(convs):
        assert len(reqs[0].prompt.split(" ")) == 20 and set(reqs[0].prompt.split(" ")) <= set(WORDS)
        for t in range(1, 3):
            head = reqs[t - 1].prompt + f" reply{c}x{t - 1}"
            assert reqs[t].prompt.startswith(head + " ")
            new_words = reqs[t].prompt[len(head) + 1:].split(" ")
            assert len(new_words) == 6 and set(new_words) <= set(WORDS)
            assert reqs[t].prompt_len == reqs[t - 1].prompt_len + 5 + 6  # reply counted by its tokens
        assert make_conversations(spec)[c].stand_in_replies == ()


def test_working_set_and_pool_size_of_the_issue():
    spec = MultiTurnSpec()
    assert (spec.num_conversations, spec.num_turns, spec.doc_len, spec.turn_len, spec.output_len) == \
        (64, 8, 2048, 256, 128)
    assert spec.max_context_tokens == 2048 + 8 * 384 + 128 == 5248  # the issue's "~5K"
    ws = working_set_tokens(64, 8, 2048, 256, 128)
    assert ws == 64 * 5248 == 335_872
    assert suggested_num_kv_blocks(ws) == 5248  # a quarter, in blocks of 16
    assert suggested_num_kv_blocks(100, block_size=16) == 2  # rounded up: 25 tokens need 2 blocks
    assert working_set_tokens(1, 0, 10, 3, 4) == 14  # no returning turns: document + one reply


def test_bad_specs():
    with pytest.raises(ValueError):
        MultiTurnSpec(num_conversations=0)
    with pytest.raises(ValueError):
        MultiTurnSpec(turn_len=0)
    spec = MultiTurnSpec(1, 1, 4, 2, 2)
    conv = make_conversations(spec)[0]
    with pytest.raises(ValueError):
        next_request(conv, spec, 2, opening_request(conv, spec), no_ids(0, 0))
