"""Speculative decoding (ngram) through the Engine on dummy:tiny: greedy output equals the output
without speculation through batching, chunking and preemption; stop ids, max_tokens and stop
strings inside an accepted run end the reply exactly where they would without it; logprobs and
usage are those of the emitted tokens; blocks return to zero after every run (spec_kit.run)."""
from __future__ import annotations

import asyncio

import pytest

from ingress.dummy_tokenizer import FIRST_FILLER_ID
from pipeline import Engine
from scheduler.spec.drafts import SpecDrafts
from stages.sampling import SamplingParams
from tests.pipeline.spec_kit import NGRAM, REPEATING, collect, config, run

GREEDY = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)


def accepted_runs(flushes: list[list[int]]) -> list[int]:
    """Positions of the reply's tokens that came after another in the same flush (inside a run)."""
    out, pos = [], 0
    for flush in flushes:
        out += list(range(pos + 1, pos + len(flush)))
        pos += len(flush)
    return out


@pytest.mark.parametrize("kw", [
    {},  # batched: every prompt in one running batch
    {"max_num_batched_tokens": 8, "long_prefill_threshold": 8},  # chunked prefill, drafts squeezed by the budget
    {"num_kv_blocks": 24, "block_size": 4, "max_model_len": 80, "shadow": False},  # preemption: the pool holds fewer than the batch
])
def test_greedy_with_ngram_equals_greedy_without(kw: dict) -> None:
    plain, _ = run(config(None, **kw), REPEATING, GREEDY)
    spec, engine = run(config(NGRAM, **kw), REPEATING, GREEDY)
    assert [r.token_ids for r in spec] == [r.token_ids for r in plain]
    assert all(r.num_output_tokens == 40 and r.finish_reason == "length" for r in spec)
    counters = engine.built.scheduler.hooks.get(SpecDrafts).counters
    assert counters.num_accepted_tokens > 0 and counters.num_drafts > 0  # the runs did speculate
    assert any(len(f) > 1 for r in spec for f in r.flushes)
    if "num_kv_blocks" in kw:
        assert engine.built.scheduler.num_preemptions > 0


def test_stop_id_max_tokens_and_stop_string_inside_an_accepted_run_end_the_reply_where_they_would() -> None:
    spec, _ = run(config(NGRAM), REPEATING, GREEDY)
    reply = next(r for r in spec if accepted_runs(r.flushes))
    pos = accepted_runs(reply.flushes)[0]  # a token that arrived inside an accepted run
    prompt = REPEATING[spec.index(reply)]
    token = reply.token_ids[pos]
    first = reply.token_ids.index(token)  # where a stop on this token ends the reply
    cases = [SamplingParams(max_tokens=40, temperature=0.0, stop_token_ids=(token,), ignore_eos=True),
             SamplingParams(max_tokens=pos + 1, temperature=0.0, ignore_eos=True)]
    if token >= FIRST_FILLER_ID:  # a filler word's text " t<i>": a stop string on it
        cases.append(SamplingParams(max_tokens=40, temperature=0.0, stop=(f" t{token}",), ignore_eos=True))
    plain_replies, _ = run(config(None), [prompt] * len(cases), cases)
    spec_replies, _ = run(config(NGRAM), [prompt] * len(cases), cases)
    for params, a, b in zip(cases, plain_replies, spec_replies):
        assert (b.token_ids, b.text, b.finish_reason, b.num_output_tokens) == (
            a.token_ids, a.text, a.finish_reason, a.num_output_tokens), params
    assert len(spec_replies[0].token_ids) == first + 1 and spec_replies[0].finish_reason == "stop"
    assert len(spec_replies[1].token_ids) == pos + 1 and spec_replies[1].finish_reason == "length"


def test_logprobs_are_those_of_the_emitted_tokens() -> None:
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, logprobs=2)
    plain, _ = run(config(None), REPEATING[:2], params)
    spec, _ = run(config(NGRAM), REPEATING[:2], params)
    for a, b in zip(plain, spec):
        assert b.token_ids == a.token_ids and len(b.logprobs) == len(b.token_ids)
        assert [lp.token_id for lp in b.logprobs] == b.token_ids
        for x, y in zip(a.logprobs, b.logprobs):
            assert y.logprob == pytest.approx(x.logprob, abs=1e-4)
            assert [t[1] for t in y.top] == [t[1] for t in x.top]


def test_an_abort_mid_speculation_frees_everything_and_the_others_finish_unchanged() -> None:
    async def main() -> tuple[list[int], list[int]]:
        async with Engine(config(NGRAM)) as engine:
            async def abort_early() -> None:
                params = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
                async for _ in engine.generate(REPEATING[0], params):
                    break  # leaving the iterator aborts the request

            other = asyncio.create_task(collect(engine, REPEATING[1], GREEDY))
            await abort_early()
            reply = await other
            for _ in range(200):
                if engine.num_active == 0:
                    break
                await asyncio.sleep(0.01)
            scheduler = engine.built.scheduler
            scheduler.check()
            assert scheduler.stats().num_used_blocks == 0
            return reply.token_ids, []

    tokens, _ = asyncio.run(main())
    plain, _ = run(config(None), REPEATING[1:2], GREEDY)
    assert tokens == plain[0].token_ids


def test_metrics_and_traces_record_drafts_and_accepted_lengths() -> None:
    from bench.prom_text import parse_metrics

    spec, engine = run(config(NGRAM), REPEATING, GREEDY)
    values = parse_metrics(engine.metrics.render().decode())
    c = engine.built.scheduler.hooks.get(SpecDrafts).counters
    assert values["ttft_spec_decode_num_drafts_total"] == c.num_drafts > 0
    assert values["ttft_spec_decode_num_draft_tokens_total"] == c.num_draft_tokens >= c.num_drafts
    assert values["ttft_spec_decode_num_accepted_tokens_total"] == c.num_accepted_tokens > 0
    assert sum(c.accepted_by_position) == c.num_accepted_tokens
    assert values['ttft_spec_decode_num_accepted_tokens_per_pos_total{position="0"}'] == c.accepted_by_position[0]
    traced = [t.info["spec_accepted"] for t in engine.traces if "spec_accepted" in t.info]
    assert sum(map(sum, traced)) == c.num_accepted_tokens and sum(map(len, traced)) == c.num_drafts
