"""Host CPU cost of one model step: the scheduler's schedule() and update(), and the emitter's
per-token path, for N decoding sequences (no model: each step's result is faked).

    python -m lab.host_step_cost [--seqs 8 64] [--context 2048] [--steps 256] [--warmup 32]
                                   [--repeat 5] [--tokenizer smollm2|dummy] [--evict-mb MB] [--out PATH]

For each N, with async scheduling off and on: a real Scheduler (the default lanes policy and shadow
reservation, prefix caching on, 16-token blocks) holds N requests with distinct ~`context`-token
prompts. They are prefilled and warmed up untimed, then every step is timed call by call, in the
order the stages make the calls:
  update    Scheduler.update(batch, result) of the oldest step in flight
  schedule  Scheduler.schedule() (async on: each decode is built ahead of its own step in flight)
  emit      EmitterStage.deliver(StepEvents) for that step's N events: RequestEmitter (detokenizer,
            stop checks), the "emit" trace charge, OutputStream.push
  frame     what the HTTP route does per output: ChatChunker.chunk, the SSE framing and its own
            "emit" trace charge
Each figure is the median step of a repeat, the lowest over the repeats (on a shared VM the time
stolen by other guests comes in bursts: it only ever adds), in us per step and per sequence (per
token for emit and frame: one token per sequence per step); the mean over all timed steps too,
since the work of a block boundary every 16 steps (growth, hashing) is in the mean and not in the
median. The runs are deterministic: `output_sha256` digests every batch, event and SSE frame, so
two versions of the code that agree on it produced the same steps and bytes. JSON goes to stdout,
and to --out if given.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import json
import random
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

from lab.host_overhead import _TEXT, fake_result, load_tokenizer
from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
from emitter.stage import EmitterStage
from protocol.responses.chunks import ChatChunker
from protocol.responses.envelope import ResponseMeta
from protocol.responses.sse import sse_event
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.channel import Channel
from stages.messages import GenerateRequest, StepBatch, StepEvents
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

PHASES = ("schedule", "update", "emit", "frame")
BLOCK_SIZE = 16
perf_ns = time.perf_counter_ns


class StepHarness:
    """One scheduler and one emitter stage with N decoding requests, stepped as the stages do."""

    def __init__(self, tok: Any, num_seqs: int, context: int, max_tokens: int, async_scheduling: bool,
                 seed: int = 0) -> None:
        max_model_len = context + max_tokens + BLOCK_SIZE
        self.sched = Scheduler(SchedulerConfig(
            num_blocks=num_seqs * (max_model_len // BLOCK_SIZE + 2) + 64, block_size=BLOCK_SIZE,
            max_num_seqs=num_seqs, max_num_batched_tokens=2048, max_model_len=max_model_len,
            enable_prefix_caching=True, async_scheduling=async_scheduling,
            eos_token_ids=frozenset(tok.eos_token_ids),
        ))
        self.emitter = EmitterStage(Channel("scheduler.inbox", 1024), lambda stream, out: None)
        self.output_ids = tok.encode(_TEXT * 4, add_special_tokens=False)  # replays real text
        self.num_seqs = num_seqs
        self.streams: list[tuple[OutputStream, ChatChunker]] = []
        self.in_flight: deque[StepBatch] = deque()
        self.digest = hashlib.sha256()
        self._num_sampled: dict[str, int] = {}
        rng = random.Random(seed)
        vocab = min(tok.vocab_size, 30000)
        params = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        for i in range(num_seqs):
            rid = f"chatcmpl-{i:08x}"
            trace = RequestTrace(rid)
            stream = OutputStream(rid, trace, 256)
            self.emitter.register(stream, RequestEmitter(rid, tok, params, num_prompt_tokens=context))
            self.streams.append((stream, ChatChunker(ResponseMeta(rid, 1700000000, "SmolLM2-135M-Instruct"))))
            prompt = [rng.randrange(100, vocab) for _ in range(context)]  # distinct: no prefix hits
            assert self.sched.add_request(GenerateRequest(rid, prompt, params, trace)) is None

    def _schedule(self) -> int:
        t0 = perf_ns()
        batch = self.sched.schedule()
        ns = perf_ns() - t0
        assert batch is not None
        self.in_flight.append(batch)
        self.digest.update(repr([(c.request_id, c.token_ids, c.start_pos, c.block_table, c.sample)
                                 for c in batch.chunks]).encode())
        return ns

    def step(self) -> dict[str, int]:
        """One step's host work, phase by phase, in ns. Keeps one step in flight (two with async
        scheduling: the one whose result comes in and the one built ahead of it)."""
        depth = 2 if self.sched.config.async_scheduling else 1
        while len(self.in_flight) < depth and self.sched.can_schedule_ahead():
            self._schedule()  # fill the pipeline (first step, or after prefills)
        batch = self.in_flight.popleft()
        result = fake_result(batch, self.output_ids, self._num_sampled)
        t0 = perf_ns()
        events = self.sched.update(batch, result)
        t_update = perf_ns() - t0
        t_schedule = self._schedule()
        self.digest.update(repr(events).encode())
        t0 = perf_ns()
        self.emitter.deliver(StepEvents(batch.step_id, events))
        t_emit = perf_ns() - t0
        t_frame = 0
        for stream, chunker in self.streams:
            out = stream.get_nowait()
            if out is None:
                continue
            t0 = perf_ns()
            data = sse_event(chunker.chunk(out))
            stream.trace.add_host("emit", perf_ns() - t0)
            t_frame += perf_ns() - t0
            self.digest.update(data)
        return {"schedule": t_schedule, "update": t_update, "emit": t_emit, "frame": t_frame,
                "num_decodes": len(events)}

    def prefill(self) -> None:
        """Until a step samples for every request: all of them decode from then on."""
        while self.step()["num_decodes"] != self.num_seqs:
            pass


class CacheEvictor:
    """Streams `mb` MiB through the CPU caches before a step, as a CPU model step does to the host's
    code and data (SmolLM2's fp32 weights are ~540 MB a step): the server's host work runs cold,
    and a hot loop hides that (`--evict-mb 0`: off)."""

    def __init__(self, mb: int) -> None:
        self._src, self._dst = bytearray(mb << 20), bytearray(mb << 20)

    def __call__(self) -> None:
        if self._src:
            self._dst[:] = self._src


def max_tokens_for(num_seqs: int, context: int, num_steps: int) -> int:
    """Room for `num_steps` decodes after the prefills, and for the tokens early prompts decode
    while later ones prefill (2048-token steps): no request ends while it is timed."""
    return num_steps + 2 * (num_seqs * context // 2048 + 16)


def measure(tok: Any, num_seqs: int, context: int, steps: int, warmup: int, repeat: int,
            async_scheduling: bool, evict: CacheEvictor = CacheEvictor(0)) -> dict[str, Any]:
    """Per-step figures for one N and one async setting (see the module docstring)."""
    per_step: list[dict[str, int]] = []
    medians: dict[str, list[float]] = {phase: [] for phase in PHASES}
    digest = hashlib.sha256()
    for rep in range(repeat):
        h = StepHarness(tok, num_seqs, context, max_tokens_for(num_seqs, context, warmup + steps),
                        async_scheduling, seed=rep)
        h.prefill()
        for _ in range(warmup):
            h.step()
        gc.collect()
        timed = []
        for _ in range(steps):
            evict()
            timed.append(h.step())
        assert all(t["num_decodes"] == num_seqs for t in timed), "every request decodes in every timed step"
        for phase in PHASES:
            medians[phase].append(statistics.median(t[phase] for t in timed))
        per_step += timed
        digest.update(h.digest.digest())
    row: dict[str, Any] = {"num_seqs": num_seqs, "async_scheduling": async_scheduling}
    for phase in PHASES:
        median = min(medians[phase]) / 1e3
        mean = statistics.fmean(t[phase] for t in per_step) / 1e3
        per = "token" if phase in ("emit", "frame") else "seq"
        row[phase] = {"us_per_step": round(median, 2), "us_per_step_mean": round(mean, 2),
                      f"us_per_{per}": round(median / num_seqs, 3)}
    row["host_us_per_step"] = round(sum(row[p]["us_per_step"] for p in PHASES), 2)
    row["output_sha256"] = digest.hexdigest()
    return row


def add_size_args(p: argparse.ArgumentParser) -> None:
    """The options this benchmark and its paired A/B (host_step_cost_ab.py) share."""
    p.add_argument("--seqs", type=int, nargs="+", default=[8, 64])
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--steps", type=int, default=256, help="timed steps per repeat")
    p.add_argument("--warmup", type=int, default=32)
    p.add_argument("--tokenizer", choices=["smollm2", "dummy"], default="smollm2")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--evict-mb", type=int, default=0, help="MiB streamed through the caches before each timed step")


def write_report(report: dict[str, Any], out: Path | None) -> None:
    """The report as JSON on stdout, and in `out` if given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.host_step_cost", description=__doc__.split("\n")[0])
    add_size_args(p)
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    tok = load_tokenizer(a.tokenizer)
    evict = CacheEvictor(a.evict_mb)
    rows = [measure(tok, n, a.context, a.steps, a.warmup, a.repeat, async_on, evict)
            for n in a.seqs for async_on in (False, True)]
    write_report({"context": a.context, "steps": a.steps, "warmup": a.warmup, "repeat": a.repeat,
                  "evict_mb": a.evict_mb,
                  "tokenizer": a.tokenizer, "block_size": BLOCK_SIZE, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
