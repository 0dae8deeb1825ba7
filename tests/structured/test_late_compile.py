"""A grammar whose compile outlasts the tokenizer (held back on purpose: the test's compile waits for
its release) no longer holds its request before the queue: the request is queued and prefilled up
to its last prompt token while the grammar compiles, only its first sampled token waits, and an
unconstrained request runs to its end meanwhile. The output is the one a cached grammar gives. A
compile that then fails, or outlasts --grammar-compile-timeout-s, is still a 400 naming the field
(or the flag), over HTTP streamed or not and for an embedder, and leaves nothing queued or held;
one that succeeds late streams the schema's output."""
from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import httpx
import pytest

from pipeline import Engine, EngineConfig
from pipeline.app import create_app
from protocol.errors import ApiError
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured.backend import GrammarError
from test_runner_hook import PROMPT, REGEX, run, text

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["n"], "additionalProperties": False}


class HeldCompiles:
    """The engine's compiles wait until `release` (then fail with `error`, if set): the test hook
    that makes a compile late, in place of the compiler's own method."""

    def __init__(self, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
        self.compiler = engine.built.grammars
        self._compile = self.compiler._compile
        self.released = threading.Event()
        self.error: Exception | None = None
        monkeypatch.setattr(self.compiler, "_compile", self._held)

    def _held(self, key):
        assert self.released.wait(20), "the test never released the compile"
        if self.error is not None:
            raise self.error
        return self._compile(key)

    def release(self, error: Exception | None = None) -> None:
        self.error = error
        self.released.set()


async def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


def config(**kw) -> EngineConfig:
    return EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, **kw)


def constrained(spec: str) -> SamplingParams:
    return SamplingParams(max_tokens=32, temperature=0.0, structured=StructuredOutput("regex", spec))


async def test_the_prefill_runs_while_the_grammar_compiles_and_others_are_not_delayed(monkeypatch):
    async with Engine(config()) as engine:
        compiles = HeldCompiles(engine, monkeypatch)
        scheduler = engine.built.scheduler
        late = asyncio.create_task(run(engine, constrained(REGEX)))
        await until(lambda: any(r.num_computed_tokens == len(PROMPT) - 1 for r in scheduler.requests.values()))
        [held] = scheduler.requests.values()
        assert held.num_output_tokens == 0 and held.request.sampling_gate is not None
        free = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
        [(ids, finish)] = await asyncio.wait_for(run(engine, free), 10)  # beside it, to its end
        assert len(ids) == 12 and finish == "length"
        assert not late.done() and held.num_output_tokens == 0 and held.num_computed_tokens == len(PROMPT) - 1
        compiles.release()
        [(late_ids, finish)] = await asyncio.wait_for(late, 10)
        assert finish == "stop" and re.fullmatch(REGEX, text(late_ids)), text(late_ids)
        assert (await run(engine, constrained(REGEX)))[0][0] == late_ids  # as with the grammar cached
        assert scheduler.gates.num_held == 1  # the cached grammar's request was not held
        assert scheduler.is_idle() and not scheduler.gates.pending
        scheduler.check()


async def test_a_late_compile_that_fails_or_times_out_is_a_400_and_leaves_nothing(monkeypatch):
    async with Engine(config(grammar_compile_timeout_s=0.3)) as engine:
        compiles = HeldCompiles(engine, monkeypatch)
        scheduler = engine.built.scheduler
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(engine)), base_url="http://t",
                                   timeout=30)
        body = {"model": engine.model_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}}
        async with client:
            replies = [asyncio.create_task(client.post("/v1/chat/completions", json={**body, "stream": stream}))
                       for stream in (False, True)]
            await until(lambda: len(scheduler.requests) == 2 and all(
                r.num_computed_tokens == r.num_tokens - 1 for r in scheduler.requests.values()))
            compiles.release(GrammarError("the schema is refused"))
            for reply in await asyncio.gather(*replies):
                assert reply.status_code == 400, reply.text
                error = reply.json()["error"]
                assert error["param"] == "response_format.json_schema.schema", error
                assert "does not compile: the schema is refused" in error["message"]
            assert scheduler.is_idle() and engine.num_active == 0
            compiles.released.clear()  # the next compile outlasts the timeout (0.3 s)
            regex = {**body, "structured_outputs": {"regex": "[a-z]{3}"}}
            del regex["response_format"]
            reply = await client.post("/v1/chat/completions", json=regex)
            assert reply.status_code == 400 and "--grammar-compile-timeout-s" in reply.json()["error"]["message"]
            assert scheduler.is_idle() and engine.num_active == 0
            compiles.release()
            with pytest.raises(ApiError) as info:  # an embedder's request: the same 400
                compiles.released.clear()
                task = asyncio.create_task(run(engine, constrained("[0-9]{2}")))
                await until(lambda: bool(scheduler.requests))
                compiles.release(GrammarError("refused"))
                await task
            assert info.value.status == 400 and engine.num_active == 0 and scheduler.is_idle()
            compiles.released.clear()  # a late compile that succeeds: the stream is the schema's
            compiles.error = None
            streamed = asyncio.create_task(client.post("/v1/chat/completions",
                                                       json={**body, "stream": True, "max_tokens": 16}))
            await until(lambda: bool(scheduler.requests) and all(
                r.num_computed_tokens == r.num_tokens - 1 for r in scheduler.requests.values()))
            compiles.release()
            reply = await streamed
            assert reply.status_code == 200, reply.text
            chunks = [json.loads(line[6:]) for line in reply.text.splitlines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
            content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
            assert json.loads(content)["n"] in range(10) and chunks[-1]["choices"][0]["finish_reason"] == "stop"
            metrics = (await client.get("/metrics")).text
            assert re.search(r"^ttft_grammar_late_compiles_total(\{[^}]*\})? 5\.0$", metrics, re.M), metrics[-2000:]
        scheduler.check()
