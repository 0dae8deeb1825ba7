"""Host overhead per request per step: the real Scheduler, RequestEmitter and SSE chunk framing,
driven with fake sampled tokens (no model), for B concurrent decoding requests.

    python -m lab.host_overhead [--batch 1 8 64 256] [--context 1024] [--steps 64]
                                  [--tokenizer smollm2|dummy] [--out bench/results/x.json]

Two measurements per batch size B:
  decode   B requests with ~`context`-token prompts are prefilled (untimed), then `steps` decode
           steps are timed call by call: schedule(), update(), RequestEmitter.on_event for every
           event, and the chat chunk + SSE framing for every output. Reported in us per request
           per step (the median step's time over B), best of `--repeat` runs.
  e2e      B requests of 64 output tokens each, from add_request to the [DONE] frame: all host work
           of the scheduler core (add, schedule, update, prefill steps included), the emitter and
           the framing, divided by B: the host cost one 64-token reply pays on its path.
The GPU's part (the StepResult) is built outside the timed regions. Results go to stdout as a
table, and to `--out` as JSON only when asked.
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

from emitter.request_emitter import RequestEmitter
from protocol.responses.chunks import ChatChunker
from protocol.responses.envelope import ResponseMeta
from protocol.responses.sse import SSE_DONE, sse_event
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

_TEXT = ("The quick brown fox jumps over the lazy dog while the scheduler hands out blocks, "
         "and every token travels from the sampler to the socket without a detour. ")
perf_ns = time.perf_counter_ns


def load_tokenizer(kind: str) -> Any:
    if kind == "dummy":
        from ingress.dummy_tokenizer import DummyTokenizer
        return DummyTokenizer(512)
    from gpu_stage.loaders import load_model_source
    return load_model_source(None).tokenizer


def fake_result(batch: Any, output_ids: list[int], num_sampled: dict[str, int]) -> StepResult:
    """The GPU's part: each sampling chunk's request gets the next id of `output_ids` (counted in
    `num_sampled`), so the outputs replay real text."""
    sampled = []
    for c in batch.chunks:
        if c.sample:
            n = num_sampled.get(c.request_id, 0)
            num_sampled[c.request_id] = n + 1
            sampled.append(SampledToken(c.request_id, output_ids[n % len(output_ids)]))
    return StepResult(batch.step_id, sampled)


class Harness:
    """One scheduler, and per request its emitter and chunker, as the stages hold them."""

    def __init__(self, tokenizer: Any, num_seqs: int, context: int, max_tokens: int, seed: int = 0) -> None:
        self.tok = tokenizer
        block_size = 16
        per_req = -(-(context + max_tokens + block_size) // block_size) + 1
        self.sched = Scheduler(SchedulerConfig(
            num_blocks=num_seqs * per_req + 64, block_size=block_size, max_num_seqs=max(num_seqs, 1),
            max_num_batched_tokens=2048, max_model_len=context + max_tokens + 64,
            long_prefill_threshold=512, enable_prefix_caching=True,
            eos_token_ids=frozenset(tokenizer.eos_token_ids),
        ))
        rng = random.Random(seed)
        text_ids = tokenizer.encode(_TEXT * 4, add_special_tokens=False)
        self.output_ids = text_ids  # the fake sampler replays real text
        vocab = min(tokenizer.vocab_size, 30000)
        self.emitters: dict[str, RequestEmitter] = {}
        self.chunkers: dict[str, ChatChunker] = {}
        self.requests: list[GenerateRequest] = []
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        for i in range(num_seqs):
            rid = f"chatcmpl-{i:08x}"
            prompt = [rng.randrange(100, vocab) for _ in range(context)]  # distinct: no prefix hits
            self.requests.append(GenerateRequest(rid, prompt, params, RequestTrace(rid)))
            self.emitters[rid] = RequestEmitter(rid, tokenizer, params, num_prompt_tokens=context)
            self.chunkers[rid] = ChatChunker(ResponseMeta(rid, 1700000000, "SmolLM2-135M-Instruct"))
        self.num_sampled: dict[str, int] = {}
        self.frames: dict[str, int] = {}

    def fake_result(self, batch: Any) -> StepResult:
        return fake_result(batch, self.output_ids, self.num_sampled)

    def step(self, t: dict[str, int]) -> int:
        """One step through every host stage; adds ns per stage to `t`; returns #events."""
        t0 = perf_ns()
        batch = self.sched.schedule()
        t1 = perf_ns()
        t["schedule"] += t1 - t0
        if batch is None:
            return 0
        result = self.fake_result(batch)
        t0 = perf_ns()
        events = self.sched.update(batch, result)
        t1 = perf_ns()
        t["update"] += t1 - t0
        outputs = []
        for ev in events:
            outputs.append(self.emitters[ev.request_id].on_event(ev))
        t2 = perf_ns()
        t["emit"] += t2 - t1
        for out in outputs:
            if out is None:
                continue
            chunker = self.chunkers[out.request_id]
            data = sse_event(chunker.chunk(out))
            if out.request_id not in self.frames:  # the role delta rides with the first token
                data = sse_event(chunker.role_chunk()) + data
            if out.finish_reason is not None:
                data += SSE_DONE
            self.frames[out.request_id] = self.frames.get(out.request_id, 0) + len(data)
        t["frame"] += perf_ns() - t2
        return len(events)


_STAGES = ("schedule", "update", "emit", "frame")


def _zero() -> dict[str, int]:
    return {"add": 0, "schedule": 0, "update": 0, "emit": 0, "frame": 0}


def bench_decode(tok: Any, num_seqs: int, context: int, steps: int) -> dict[str, float]:
    # early prefills decode while later ones prefill: room for those tokens too
    h = Harness(tok, num_seqs, context, max_tokens=steps + 16 + num_seqs * context // 2048)
    for req in h.requests:
        h.sched.add_request(req)
    scratch = _zero()
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in h.sched.requests.values()):
        h.step(scratch)  # prefill, untimed
    for _ in range(2):
        h.step(scratch)  # warm
    per_step: list[dict[str, int]] = []
    gc.collect()
    for _ in range(steps):
        t = _zero()
        assert h.step(t) == num_seqs, "every request decodes in every timed step"
        per_step.append(t)
    # The median step, stage by stage: robust to the odd step that a busy machine preempts.
    per = {k: statistics.median(t[k] for t in per_step) / num_seqs / 1e3 for k in _STAGES}
    per["sched_total"] = per["schedule"] + per["update"]
    per["emit_total"] = per["emit"] + per["frame"]
    return per


def bench_e2e(tok: Any, num_seqs: int, context: int, max_tokens: int = 64) -> dict[str, float]:
    h = Harness(tok, num_seqs, context, max_tokens, seed=1)
    t = _zero()
    gc.collect()
    t0 = perf_ns()
    for req in h.requests:
        h.sched.add_request(req)
    t["add"] += perf_ns() - t0
    num_steps = 0
    while h.sched.has_work():
        h.step(t)
        num_steps += 1
    assert all(e.finished for e in h.emitters.values())
    total = sum(t.values())
    out = {k: v / num_seqs / 1e6 for k, v in t.items()}  # ms per request
    out["total_ms"] = total / num_seqs / 1e6
    out["num_steps"] = num_steps
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.host_overhead", description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64, 256])
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3, help="best of N runs per batch size")
    p.add_argument("--tokenizer", choices=["smollm2", "dummy"], default="smollm2")
    p.add_argument("--out", type=Path, default=None, help="write JSON here (under bench/results/)")
    a = p.parse_args(argv)
    tok = load_tokenizer(a.tokenizer)
    rows: list[dict[str, Any]] = []
    print(f"us per request per step (decode, ~{a.context}-token contexts); e2e: ms per 64-token request")
    print(f"{'B':>5} {'schedule':>9} {'update':>8} {'sch+upd':>8} {'emit':>7} {'frame':>7} {'emit+fr':>8}"
          f" | {'e2e ms':>7} {'(sched':>7} {'emit':>6} {'frame)':>7}")
    for b in a.batch:
        dec = min((bench_decode(tok, b, a.context, a.steps) for _ in range(a.repeat)),
                  key=lambda d: d["sched_total"] + d["emit_total"])
        e2e = min((bench_e2e(tok, b, a.context) for _ in range(a.repeat)), key=lambda d: d["total_ms"])
        rows.append({"batch": b, "decode_us_per_req_step": dec, "e2e_ms_per_request": e2e})
        e_sched = e2e["add"] + e2e["schedule"] + e2e["update"]
        print(f"{b:>5} {dec['schedule']:9.2f} {dec['update']:8.2f} {dec['sched_total']:8.2f} {dec['emit']:7.2f}"
              f" {dec['frame']:7.2f} {dec['emit_total']:8.2f} | {e2e['total_ms']:7.3f} {e_sched:7.3f}"
              f" {e2e['emit']:6.3f} {e2e['frame']:7.3f}")
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"context": a.context, "steps": a.steps, "tokenizer": a.tokenizer,
                                     "rows": rows}, indent=2))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
