"""Candidate (1) of the concurrent-lanes issue, measured before it is built: does a decode step on a
high-priority CUDA stream get through while a long prompt's chunks run on a low-priority one?

    python -m lab.stream_priority_probe --out PATH.json [--tiny]

Two ModelRunners on one GPU (dummy llama-3.1-8b, the same weights twice: a runner is not built to
share its weights, and at 16 GB a copy the second read costs the same HBM traffic as the first):
  latency lane  `--batch` decoding rows at `--context` tokens (CUDA graphs) and, every 16th step,
                a 128-token prefill of a fresh request (a short request's step);
  long lane     a `--long-len`-token prompt prefilled in `--chunk`-token chunks (eager, as long
                steps run), twice.
Each lane runs in its own thread on its own stream. Modes, one after the other:
  solo          each lane alone: its step times and the long prompt's TTFT;
  serial        the lanes in one thread on one stream, a decode step after each chunk (today's
                one-step-at-a-time: a decode waits for the chunk before it);
  streams       both threads at once, each on a default-priority stream of its own;
  priority      both at once, the latency lane's stream at the highest priority the device has.
Per mode: the decode step's P50/P99/max ms, the short prefill's P50/max ms, the long prompt's TTFT
(ms, and its ratio to solo). On CPU (`--tiny`, dummy:tiny) there are no streams: a smoke run of the
same code.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import threading
import time

import torch

from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from stages.messages import NewRequestData, ScheduledChunk, StepBatch
from stages.sampling import SamplingParams

BLOCK = 16
SHORT = 128
PARAMS = SamplingParams(max_tokens=1 << 20, temperature=0.0, ignore_eos=True)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


class LatencyLane:
    """`batch` decode rows at a fixed context, and a short prefill every 16th step."""

    def __init__(self, runner: ModelRunner, batch: int, context: int) -> None:
        self.runner, self.batch, self.context = runner, batch, context
        width = -(-(context + 8) // BLOCK)
        self.tables = [list(range(1 + i * width, 1 + (i + 1) * width)) for i in range(batch + 1)]
        self.step_id = 0
        self.num_short = 0
        self._run(StepBatch(self._next(), [NewRequestData(f"d{i}", [1], PARAMS) for i in range(batch)], []))

    def _next(self) -> int:
        self.step_id += 1
        return self.step_id

    def _run(self, batch: StepBatch) -> float:
        t0 = time.perf_counter()
        result = self.runner.execute(batch)
        assert result.error is None and not result.failed, (result.error, result.failed)
        return (time.perf_counter() - t0) * 1e3

    def decode(self) -> float:
        chunks = [ScheduledChunk(f"d{i}", [1], self.context, self.tables[i], True) for i in range(self.batch)]
        return self._run(StepBatch(self._next(), [], chunks))

    def short(self) -> float:
        """A fresh 128-token request's prefill (its own step, as the lanes give it), then its end."""
        self.num_short += 1
        rid = f"s{self.num_short}"
        ms = self._run(StepBatch(self._next(), [NewRequestData(rid, [1] * SHORT, PARAMS)],
                                 [ScheduledChunk(rid, [2 + i % 60 for i in range(SHORT)], 0, self.tables[-1], True)]))
        self._run(StepBatch(self._next(), [], [], [rid]))
        return ms

    def step(self, k: int, decodes: list[float], shorts: list[float]) -> None:
        (shorts.append(self.short()) if k % 16 == 15 else decodes.append(self.decode()))


class LongLane:
    """A long prompt prefilled chunk by chunk."""

    def __init__(self, runner: ModelRunner, length: int, chunk: int, vocab: int) -> None:
        self.runner, self.length, self.chunk, self.vocab = runner, length, chunk, vocab
        self.table = list(range(1, 2 + length // BLOCK))
        self.step_id = 0
        self.num = 0

    def chunks(self):
        """Yield after each chunk's step; the prompt's end is a last (finish) step."""
        self.num += 1
        rid = f"L{self.num}"
        prompt = [(7 * i) % (self.vocab - 2) + 2 for i in range(self.length)]
        pos = 0
        while pos < self.length:
            end = min(self.length, pos + self.chunk)
            self.step_id += 1
            new = [NewRequestData(rid, prompt, SamplingParams(temperature=0.0, max_tokens=1))] if pos == 0 else []
            result = self.runner.execute(StepBatch(self.step_id, new, [ScheduledChunk(rid, prompt[pos:end], pos,
                                                                                       self.table, end == self.length)]))
            assert result.error is None and not result.failed, (result.error, result.failed)
            pos = end
            yield
        self.step_id += 1
        self.runner.execute(StepBatch(self.step_id, [], [], [rid]))

    def prefill(self) -> float:
        t0 = time.perf_counter()
        for _ in self.chunks():
            pass
        return (time.perf_counter() - t0) * 1e3


def summary(decodes: list[float], shorts: list[float], ttfts: list[float], solo_ttft: float | None) -> dict:
    out = {"decode_p50_ms": statistics.median(decodes) if decodes else None, "decode_p99_ms": pct(decodes, 0.99),
           "decode_max_ms": max(decodes, default=None), "decodes": len(decodes),
           "short_p50_ms": statistics.median(shorts) if shorts else None, "short_max_ms": max(shorts, default=None),
           "long_ttft_ms": statistics.median(ttfts) if ttfts else None}
    if solo_ttft and ttfts:
        out["long_ttft_ratio_to_solo"] = out["long_ttft_ms"] / solo_ttft
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}


def concurrent(lat: LatencyLane, long: LongLane, streams: tuple | None, rounds: int) -> tuple[list, list, list]:
    """Both lanes at once, each in its own thread (and on its own stream when `streams`)."""
    decodes: list[float] = []
    shorts: list[float] = []
    ttfts: list[float] = []
    done = threading.Event()

    def on(stream):
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def latency() -> None:
        with on(streams[0] if streams else None):
            k = 0
            while not done.is_set():
                lat.step(k, decodes, shorts)
                k += 1

    def throughput() -> None:
        with on(streams[1] if streams else None):
            for _ in range(rounds):
                ttfts.append(long.prefill())
        done.set()

    threads = [threading.Thread(target=latency), threading.Thread(target=throughput)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return decodes, shorts, ttfts


def serial(lat: LatencyLane, long: LongLane, rounds: int) -> tuple[list, list, list]:
    """One thread, one stream: a decode (or short) step after each chunk, as one step at a time
    runs; each of its times includes the chunk before it (a decode row that joins a chunk's step,
    or a short request queued behind it, waits that long)."""
    decodes: list[float] = []
    shorts: list[float] = []
    ttfts: list[float] = []
    k = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        chunk_t0 = t0
        for _ in long.chunks():
            chunk_ms = (time.perf_counter() - chunk_t0) * 1e3
            mine_d, mine_s = [], []
            lat.step(k, mine_d, mine_s)
            k += 1
            decodes.extend(d + chunk_ms for d in mine_d)
            shorts.extend(x + chunk_ms for x in mine_s)
            chunk_t0 = time.perf_counter()
        ttfts.append((time.perf_counter() - t0) * 1e3)
    return decodes, shorts, ttfts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=2048)
    p.add_argument("--long-len", type=int, default=32768)
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    if a.tiny:
        model, device, dtype, backend = "dummy:tiny", "cpu", torch.float32, "torch"
        a.context, a.long_len, a.chunk, a.rounds = min(a.context, 256), min(a.long_len, 1024), min(a.chunk, 256), 1
    else:
        model, device, dtype, backend = "dummy:llama-3.1-8b", "cuda", torch.bfloat16, "triton"
    source = load_model_source(model)
    lat_blocks = (a.batch + 1) * (-(-(a.context + 8) // BLOCK)) + 8
    lat_runner = ModelRunner.build(source, device, dtype, lat_blocks, BLOCK, 512, max(a.batch, 8),
                                   attention_backend=backend, max_model_len=a.context + 64)
    long_runner = ModelRunner.build(load_model_source(model), device, dtype, 2 + a.long_len // BLOCK + 8, BLOCK,
                                    a.chunk, 8, attention_backend=backend, enforce_eager=True,
                                    max_model_len=a.long_len + 64)
    long_runner.warm_thread()
    lat, long = LatencyLane(lat_runner, a.batch, a.context), LongLane(long_runner, a.long_len, a.chunk,
                                                                       source.config.vocab_size)
    for k in range(40):  # first uses: compiles, plans
        lat.step(k, [], [])
    long.prefill()
    out: dict = {"model": model, "batch": a.batch, "context": a.context, "long_len": a.long_len, "chunk": a.chunk}
    decodes: list[float] = []
    shorts: list[float] = []
    for k in range(320):
        lat.step(k, decodes, shorts)
    solo = [long.prefill() for _ in range(a.rounds)]
    out["solo"] = summary(decodes, shorts, solo, None)
    solo_ttft = statistics.median(solo)
    out["serial"] = summary(*serial(lat, long, a.rounds), solo_ttft)
    cuda = device == "cuda"
    if cuda:
        least, greatest = torch.cuda.Stream.priority_range() if hasattr(torch.cuda.Stream, "priority_range") \
            else (0, -1)
        out["priority_range"] = [least, greatest]
        out["streams"] = summary(*concurrent(lat, long, (torch.cuda.Stream(), torch.cuda.Stream()), a.rounds),
                                 solo_ttft)
        out["priority"] = summary(*concurrent(lat, long, (torch.cuda.Stream(priority=greatest),
                                                          torch.cuda.Stream(priority=least)), a.rounds), solo_ttft)
    else:
        out["threads"] = summary(*concurrent(lat, long, None, a.rounds), solo_ttft)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
