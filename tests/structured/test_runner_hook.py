"""GrammarHook in a whole engine (dummy:tiny: random weights, so any structure in the output is the
grammar's): constrained outputs match, with async scheduling (a step's masks wait for the previous
step's tokens), n > 1, preemption (a pool too small for every request at once), stop strings and
max_tokens; unconstrained greedy requests beside them are unchanged; with speculative decoding the
constrained rows get no drafts (counted) and still match; an embedder's bad grammar is a 400."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest
import torch

from gpu_stage.sampling.penalties import PenaltyCache
from gpu_stage.sampling.states import SamplingStates
from ingress.dummy_tokenizer import DummyTokenizer
from pipeline import Engine, EngineConfig
from protocol.errors import ApiError
from scheduler.spec.drafts import SpecDrafts
from stages.messages import NewRequestData, ScheduledChunk, StepBatch, StepResult
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured.bitmask import GrammarBitmask
from structured.compiler import GrammarCompiler
from structured.runner_hook import GrammarHook

PROMPT = list(range(10, 40))
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "tag": {"enum": ["red", "green"]}},
          "required": ["id", "tag"], "additionalProperties": False}
REGEX = r"[a-c]{2,5}-[0-9]{2}"


def config(**kw) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=kw.pop("num_kv_blocks", 128), max_model_len=512, **kw)


def constrained(kind: str, spec: str, **kw) -> SamplingParams:
    return SamplingParams(**{"max_tokens": 64, "temperature": 0.0, **kw}, structured=StructuredOutput(kind, spec))


async def run(engine: Engine, params: SamplingParams, n: int = 1) -> list[tuple[list[int], str | None]]:
    tokens: dict[int, list[int]] = {}
    finish: dict[int, str | None] = {}
    async for out in engine.generate(PROMPT, params, n=n):
        tokens.setdefault(out.index, []).extend(out.token_ids)
        if out.finish_reason is not None:
            finish[out.index] = out.finish_reason
    return [(tokens.get(i, []), finish[i]) for i in range(n)]


def text(ids: list[int]) -> str:
    return DummyTokenizer(512).decode(ids)


def check_outputs(results) -> None:
    """Every (kind, output, finish) finished by the grammar and matches it (a test with "json"
    outputs skips at its start where jsonschema is not installed: `needs_jsonschema`)."""
    for kind, (ids, finish) in results:
        assert finish == "stop", (kind, text(ids), finish)
        if kind == "regex":
            assert re.fullmatch(REGEX, text(ids)), text(ids)
        else:
            import jsonschema  # (only the tests with JSON outputs need it: see needs_jsonschema)

            jsonschema.validate(json.loads(text(ids)), SCHEMA)


def needs_jsonschema() -> None:
    """Skip this test where jsonschema is not installed (the GPU host lacks it; the rest run)."""
    pytest.importorskip("jsonschema")


@pytest.mark.parametrize("async_scheduling", [False, True])
async def test_constrained_outputs_match_beside_unchanged_greedy_ones(async_scheduling):
    needs_jsonschema()
    free = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    async with Engine(config(async_scheduling=async_scheduling)) as engine:
        alone = (await run(engine, free))[0][0]
        jobs = [run(engine, free)] + [run(engine, constrained("regex", REGEX)) for _ in range(3)]
        jobs += [run(engine, constrained("json_schema", json.dumps(SCHEMA), temperature=1.0, seed=s), n=2)
                 for s in range(2)]
        results = await asyncio.gather(*jobs)
        assert results[0][0][0] == alone  # greedy, unchanged by the grammars batched beside it
        check_outputs([("regex", r[0]) for r in results[1:4]] + [("json", c) for r in results[4:] for c in r])
        await run(engine, free)  # finished ids reach the runner with the next step
        assert engine.built.runner.hook.num_live == 0  # every matcher released


@pytest.mark.parametrize("kv_dtype", ["auto", "int8"])
async def test_preempted_requests_resume_their_grammar(kv_dtype):
    # 23 usable blocks of 4 tokens; four requests of 30 + 40 tokens need 72: some are preempted.
    long_regex = "[a-c]{40}"
    async with Engine(EngineConfig(model="dummy:tiny", num_kv_blocks=24, block_size=4, max_model_len=80,
                                   shadow=False, kv_cache_dtype=kv_dtype)) as engine:
        results = await asyncio.gather(*[run(engine, constrained("regex", long_regex, temperature=1.0, seed=s, max_tokens=41))
                                         for s in range(4)])
        for ids, finish in (r[0] for r in results):
            assert finish == "stop" and re.fullmatch(long_regex, text(ids))
        assert engine.built.scheduler.num_preemptions > 0


async def test_max_tokens_truncates_and_stop_strings_still_stop():
    async with Engine(config()) as engine:
        (ids, finish), = await run(engine, constrained("regex", "[a-z]{40}", max_tokens=5))
        assert finish == "length" and re.fullmatch("[a-z]{5}", text(ids))
        (ids, finish), = await run(engine, constrained("regex", "abcdef", stop=("cd",)))
        assert finish == "stop" and text(ids) == "abcd"  # ended at the stop string (the ids keep it)


async def test_speculation_leaves_constrained_rows_without_drafts():
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1}'
    async with Engine(config(speculative_config=spec, async_scheduling=False)) as engine:
        results = await asyncio.gather(*[run(engine, constrained("regex", REGEX)) for _ in range(2)])
        check_outputs([("regex", r[0]) for r in results])
        counters = engine.built.scheduler.hooks.get(SpecDrafts).counters
        assert counters.num_constrained_rows > 0


async def test_an_embedders_bad_grammar_is_a_400_before_queueing():
    async with Engine(config()) as engine:
        with pytest.raises(ApiError) as info:
            await run(engine, constrained("regex", "a(b"))
        assert info.value.status == 400 and "unclosed group" in info.value.message
        assert engine.num_active == 0


# -- the hook alone, driven as the runner drives it ----------------------------------------------

def hook_parts(backend, hand_over=None):
    compiler = GrammarCompiler(lambda: backend)
    hook = GrammarHook(compiler, GrammarBitmask(8, 512, torch.device("cpu")), hand_over=hand_over)
    return compiler, hook, SamplingStates(PenaltyCache(512, torch.device("cpu"), 0))


def launch(hook, states, batch):
    """What ModelRunner.launch does with the hook: admit, begin, rows, process (full batch)."""
    for new in batch.new_requests:
        states.admit(new)
    part = hook.begin(batch, states)
    rows, _, ids = states.sampling_rows(batch, StepResult(batch.step_id, []), None, part.rows if part else None)
    logits = torch.zeros(len(rows), 512)
    return part, rows, ids, logits


def step(step_id, rids, new=()):
    return StepBatch(step_id, [NewRequestData(r, [5, 6], p) for r, p in new],
                     [ScheduledChunk(r, [5], 1, [1], True) for r in rids])


def test_the_hook_masks_constrained_rows_only_and_a_retry_masks_the_same_row(backend):
    compiler, hook, states = hook_parts(backend)
    try:
        choice = SamplingParams(structured=StructuredOutput("choice", '["ab", "cd"]'))
        part, rows, ids, logits = launch(hook, states, step(0, ["c", "f"], [("c", choice), ("f", SamplingParams())]))
        out = part.process_logits(logits, rows)
        allowed = torch.isfinite(out[0]).nonzero().flatten().tolist()
        assert allowed == [ord("a") + 3, ord("c") + 3] and torch.isfinite(out[1]).all()
        assert torch.isfinite(logits).all()  # the input left as it is
        again = part.process_logits(logits[:1], rows[:1])  # the row-by-row retry of row 0
        assert torch.equal(again, out[:1])
        assert torch.isfinite(part.process_logits(logits[1:], rows[1:])).all()
        hook.release("c")
        assert hook.num_live == 0
    finally:
        compiler.close()


def test_a_grammar_that_fails_to_compile_fails_its_row_only(backend):
    compiler, hook, states = hook_parts(backend)
    try:
        bad = SamplingParams(structured=StructuredOutput("regex", "a(b"))
        part, rows, ids, logits = launch(hook, states, step(0, ["b", "f"], [("b", bad), ("f", SamplingParams())]))
        with pytest.raises(ValueError, match="unclosed group"):
            part.process_logits(logits, rows)
        with pytest.raises(ValueError):
            part.process_logits(logits[:1], rows[:1])
        part.process_logits(logits[1:], rows[1:])  # the other row samples
    finally:
        compiler.close()


def test_a_step_waits_for_the_previous_steps_tokens_unless_that_never_sampled(backend):
    compiler, hook, states = hook_parts(backend)
    try:
        choice = SamplingParams(structured=StructuredOutput("choice", '["ab", "cd"]'))
        first, rows, _, logits = launch(hook, states, step(0, ["c"], [("c", choice)]))
        first.process_logits(logits, rows)
        second, rows2, _, logits2 = launch(hook, states, step(1, ["c"]))  # built ahead of step 0's token

        def complete_step_0():
            states.requests["c"].output_token_ids.append(ord("c") + 3)  # what complete() records
            first.done(StepResult(0, []))

        threading.Timer(0.05, complete_step_0).start()
        out = second.process_logits(logits2, rows2)  # waits for step 0, then reads "c"
        assert torch_allowed(out) == [ord("d") + 3]
        # A step whose launch failed before its sampling is never waited for.
        _, rows3, _, logits3 = launch(hook, states, step(2, ["c"]))
        orphan = hook._last
        fourth, rows4, _, logits4 = launch(hook, states, step(3, ["c"]))
        assert fourth.previous is orphan and orphan._masked is None
        fourth.process_logits(logits4, rows4)  # returns at once
    finally:
        compiler.close()


def torch_allowed(out):
    return torch.isfinite(out[0]).nonzero().flatten().tolist()


def test_a_waited_for_step_holds_its_result_until_the_waiting_steps_sampling_is_queued(backend):
    compiler, hook, states = hook_parts(backend, hand_over=True)
    try:
        choice = SamplingParams(structured=StructuredOutput("choice", '["ab", "cd"]'))
        first, rows, _, logits = launch(hook, states, step(0, ["c"], [("c", choice)]))
        first.process_logits(logits, rows)
        second, rows2, _, logits2 = launch(hook, states, step(1, ["c"]))  # built ahead of step 0's token
        order = []

        def launch_thread():  # the runner's launch of step 1: masks, then the sampling queued
            out = second.process_logits(logits2, rows2)
            order.append(("masked", torch_allowed(out)))
            time.sleep(0.05)
            order.append("queued")
            second.sampling_queued()

        thread = threading.Thread(target=launch_thread)
        thread.start()
        deadline = time.monotonic() + 5
        while first._waiter is None and time.monotonic() < deadline:  # step 1 waits for step 0
            time.sleep(0.001)
        assert first._waiter is second
        states.requests["c"].output_token_ids.append(ord("c") + 3)  # what complete() records
        first.done(StepResult(0, []))  # the completer: held until step 1's sampling is queued
        order.append("step 0 handed on")
        thread.join(5)
        assert order == [("masked", [ord("d") + 3]), "queued", "step 0 handed on"]
        # A step nobody waits for yet is not held (its successor, launched later, does not wait).
        third, rows3, _, logits3 = launch(hook, states, step(2, ["c"]))
        third.sampling_queued()
        t0 = time.monotonic()
        second.done(StepResult(1, []))
        assert time.monotonic() - t0 < 0.5 and second._waiter is None
    finally:
        compiler.close()


def test_on_cpu_a_step_is_not_held_by_default(backend):
    compiler, hook, states = hook_parts(backend)
    try:
        assert not hook.hand_over  # on CPU queueing the sampling is computing it: no hand-over
        choice = SamplingParams(structured=StructuredOutput("choice", '["ab", "cd"]'))
        first, rows, _, logits = launch(hook, states, step(0, ["c"], [("c", choice)]))
        first.process_logits(logits, rows)
        second, rows2, _, logits2 = launch(hook, states, step(1, ["c"]))
        thread = threading.Thread(target=second.process_logits, args=(logits2, rows2))
        thread.start()
        time.sleep(0.05)  # step 1 is waiting, unregistered
        assert first._waiter is None
        states.requests["c"].output_token_ids.append(ord("c") + 3)
        first.done(StepResult(0, []))  # returns at once: step 1 never reports its sampling queued
        thread.join(5)
        assert not thread.is_alive()
    finally:
        compiler.close()


async def test_constrained_outputs_match_with_the_hand_over_on_cpu():
    needs_jsonschema()
    async with Engine(config(async_scheduling=True)) as engine:
        engine.built.runner.hook.hand_over = True  # as on a GPU
        jobs = [run(engine, constrained("regex", REGEX)) for _ in range(3)]
        jobs += [run(engine, constrained("json_schema", json.dumps(SCHEMA), temperature=1.0, seed=s)) for s in range(3)]
        results = await asyncio.gather(*jobs)
        check_outputs([("regex", r[0]) for r in results[:3]] + [("json", r[0]) for r in results[3:]])
