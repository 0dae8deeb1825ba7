"""`ttft bench --workload interference`: what a long prompt's prefill does to everyone else.

N streams decode without pause; a long prompt arrives every T seconds and a short request every t
seconds. Before that, on the same server and with nothing else running, the run measures the idle
baselines: a short request's TTFT alone, the N streams' inter-token gap alone, a long prompt's TTFT
alone (solo). The report (bench/interference_report.py) divides what the loaded phase measured by
them: shorts arriving during a long prefill, the streams' gaps that overlap one, the long prompts'
own TTFT. Every prompt has content of its own (no prefix hits flatter anything).

Presets: `h100`, the issue's GPU run (8 streams, a 32K prompt every 3 s, a 128-token request every
250 ms); `cpu`, the same shape sized for SmolLM2 on a few cores (~3,000-token long prompts, short
chat prompts, 2 streams).
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Awaitable, Callable

import numpy as np

from bench.sample import RequestSample, StreamRecorder
from bench.workloads import BenchRequest, PromptMaker, PromptFormat


@dataclass(frozen=True)
class InterferenceSpec:
    num_streams: int = 8
    stream_prompt_len: int = 128
    stream_output_len: int = 1024  # a stream that ends starts again at once
    long_len: int = 32768
    long_every_s: float = 3.0
    long_output_len: int = 4
    short_len: int = 128
    short_every_s: float = 0.25
    short_output_len: int = 16
    duration_s: float = 30.0  # of the loaded phase (arrivals stop then; what is in flight finishes)
    idle_shorts: int = 20  # short requests timed alone, one after another
    idle_decode_s: float = 5.0  # the streams decoding alone
    solo_longs: int = 2  # long prompts timed alone

    def __post_init__(self) -> None:
        for name in ("num_streams", "stream_prompt_len", "stream_output_len", "long_len", "long_output_len",
                     "short_len", "short_output_len", "idle_shorts", "solo_longs"):
            if getattr(self, name) < 1:
                raise ValueError(f"interference: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("long_every_s", "short_every_s", "duration_s", "idle_decode_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"interference: {name} must be > 0, got {getattr(self, name)}")


PRESETS = {
    "h100": InterferenceSpec(),
    # A 3,000-token prompt takes 30-90 s on two shared cores, a short chat request ~1 s of them: one
    # long prompt per run (a second would queue behind the first and count its wait as its own),
    # shorts every 5 s (denser, they alone would take a large share of the machine from the long one).
    "cpu": InterferenceSpec(num_streams=2, stream_prompt_len=32, stream_output_len=256, long_len=3000,
                            long_every_s=150.0, long_output_len=2, short_len=40, short_every_s=5.0,
                            short_output_len=8, duration_s=150.0, idle_shorts=8, idle_decode_s=15.0,
                            solo_longs=1),
}


def preset(name: str, **overrides: object) -> InterferenceSpec:
    """A preset with some fields replaced (those given as None keep the preset's)."""
    return replace(PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})


SendFn = Callable[[BenchRequest, StreamRecorder], Awaitable[RequestSample]]
RecorderFn = Callable[[BenchRequest], StreamRecorder]


@dataclass
class Phases:
    """What the run measured, times in seconds from perf_counter (absolute: windows compare)."""
    idle_shorts: list[RequestSample]
    idle_streams: list[RequestSample]
    solo_longs: list[RequestSample]
    streams: list[RequestSample]
    longs: list[RequestSample]
    shorts: list[RequestSample]


class Requests:
    """The run's requests, each prompt fresh: `kind-index` ids, lengths from the spec."""

    def __init__(self, spec: InterferenceSpec, prompt_format: PromptFormat, vocab_size: int, seed: int) -> None:
        self.spec = spec
        self.maker = PromptMaker(np.random.default_rng(seed), prompt_format, vocab_size)
        self.count = 0

    def make(self, kind: str) -> BenchRequest:
        spec = self.spec
        length, output = {"short": (spec.short_len, spec.short_output_len),
                          "long": (spec.long_len, spec.long_output_len),
                          "stream": (spec.stream_prompt_len, spec.stream_output_len)}[kind]
        self.count += 1
        return BenchRequest(f"{kind}-{self.count}", self.maker.make(length), length, output)


async def _one(send: SendFn, recorder: RecorderFn, req: BenchRequest) -> RequestSample:
    return await send(req, recorder(req))


async def _streams(send: SendFn, recorder: RecorderFn, requests: Requests, stop: asyncio.Event,
                   out: list[RequestSample]) -> None:
    """N streams until `stop`: each restarts when its reply ends; a reply cut by `stop` keeps the
    chunk times it has."""
    async def stream() -> None:
        while not stop.is_set():
            req = requests.make("stream")
            rec = recorder(req)
            out.append(rec.sample)
            task = asyncio.ensure_future(send(req, rec))
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            stopped.cancel()

    await asyncio.gather(*(stream() for _ in range(requests.spec.num_streams)))


async def run_interference(send: SendFn, recorder: RecorderFn, requests: Requests) -> Phases:
    """The idle baselines, then the loaded phase; one server, one client."""
    spec = requests.spec
    idle_shorts = [await _one(send, recorder, requests.make("short")) for _ in range(spec.idle_shorts)]
    idle_streams: list[RequestSample] = []
    stop = asyncio.Event()
    streaming = asyncio.ensure_future(_streams(send, recorder, requests, stop, idle_streams))
    await asyncio.sleep(spec.idle_decode_s)
    stop.set()
    await streaming
    solo_longs = [await _one(send, recorder, requests.make("long")) for _ in range(spec.solo_longs)]

    streams: list[RequestSample] = []
    stop = asyncio.Event()
    streaming = asyncio.ensure_future(_streams(send, recorder, requests, stop, streams))
    arrivals: list[asyncio.Future] = []
    t0 = time.perf_counter()
    # The streams settle first; then each kind arrives on its own period, shorts offset so that
    # they land at every phase of a long prefill rather than in step with its start.
    due = sorted([(t0 + spec.long_every_s / 4 + k * spec.long_every_s, "long")
                  for k in range(int(spec.duration_s / spec.long_every_s + 0.999))]
                 + [(t0 + spec.short_every_s / 2 + k * spec.short_every_s, "short")
                    for k in range(int(spec.duration_s / spec.short_every_s))])
    for at, kind in due:
        if at > t0 + spec.duration_s:
            break
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        arrivals.append(asyncio.ensure_future(_one(send, recorder, requests.make(kind))))
    done = await asyncio.gather(*arrivals)
    stop.set()
    await streaming
    return Phases(idle_shorts, idle_streams, solo_longs, streams,
                  [s for s in done if s.request_id.startswith("long")],
                  [s for s in done if s.request_id.startswith("short")])
