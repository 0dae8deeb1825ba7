"""Every step of a long prompt's prefill beside decoding streams, with and without concurrent lanes:

    python -m lab.interference_steps on|off [--long-len 3000] [--streams 2] [--out PATH]
        [--model dummy:llama-3.1-8b --device cuda --max-model-len 40960] [--short-every-s 0.25]

An Engine in this process (the default model, SmolLM2 on CPU; its default flags, `off`:
--no-concurrent-lanes) runs `--streams` greedy streams of 256 tokens, restarted as they end; after
5 s a `--long-len`-token prompt arrives. Each step the scheduler applies while the prompt prefills
is written as a JSON line: when its result came (s from the prompt's arrival), its decode rows, its
prefill chunks (request, start, tokens), its measured device time and what the step budget's cost
model predicted for it (off: the seed's; the model learns only while on); the last line holds the
prompt's TTFT and the model's coefficients. One timeline of both lanes' work: the decode rows and
the long prompt's chunks. Each step also says how long its launch held the host ("launch_ms": the
runner's launch, input preparation to the last kernel queued) and whether it replayed a CUDA graph,
to tell a step's device time from its host time. `--short-every-s` adds 128-token requests at that
period during the prefill (their TTFTs are in the last line), as the interference ablation does.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np

from bench.workloads import PromptMaker
from gpu_stage.model_runner import ModelRunner
from pipeline import Engine, EngineConfig
from scheduler.step_cost import step_features
from stages.sampling import SamplingParams


def _time_launches(launch_ms: dict[int, float]) -> None:
    """Record each step's host time in ModelRunner.launch, by step id."""
    launch = ModelRunner.launch

    def timed_launch(self, batch):
        t0 = time.perf_counter()
        launched = launch(self, batch)
        launch_ms[batch.step_id] = round((time.perf_counter() - t0) * 1000, 3)
        return launched

    ModelRunner.launch = timed_launch  # type: ignore[method-assign]


async def run(lanes: bool, long_len: int, num_streams: int, engine_kwargs: dict,
              short_every_s: float = 0.0) -> list[dict]:
    launch_ms: dict[int, float] = {}
    _time_launches(launch_ms)
    async with Engine(EngineConfig(concurrent_lanes=lanes, **engine_kwargs)) as engine:
        sched = engine.built.scheduler
        steps: list[tuple[float, dict]] = []
        update = sched.update

        def logged_update(batch, result):
            features = step_features((len(c.token_ids), c.start_pos) for c in batch.chunks)
            steps.append((time.perf_counter(), {
                "rows": sum(len(c.token_ids) == 1 for c in batch.chunks),
                "chunks": [(c.request_id[-6:], c.start_pos, len(c.token_ids)) for c in batch.chunks
                           if len(c.token_ids) > 1],
                "device_s": round(result.duration_ns / 1e9, 4),
                "launch_ms": launch_ms.pop(batch.step_id, None),
                "predicted_s": round(sched.budget.cost.predict_s(*features), 4)}))
            return update(batch, result)

        sched.update = logged_update
        maker = PromptMaker(np.random.default_rng(0), "text", 32000)
        tokens = engine.tokenizer.encode
        stop = asyncio.Event()

        async def stream() -> None:
            while not stop.is_set():
                params = SamplingParams(max_tokens=256, temperature=0.0, ignore_eos=True)
                async for _ in engine.generate(tokens(maker.make(32)), params):
                    if stop.is_set():
                        break

        async def short(ttfts: list[float]) -> None:
            t = time.perf_counter()
            async for _ in engine.generate(tokens(maker.make(128))[:128], SamplingParams(max_tokens=1)):
                ttfts.append(round((time.perf_counter() - t) * 1000, 2))
                break

        async def shorts(ttfts: list[float], done: asyncio.Event) -> None:
            pending = []
            while short_every_s > 0 and not done.is_set():
                pending.append(asyncio.ensure_future(short(ttfts)))
                await asyncio.sleep(short_every_s)
            await asyncio.gather(*pending, return_exceptions=True)

        streams = [asyncio.ensure_future(stream()) for _ in range(num_streams)]
        await asyncio.sleep(5.0)
        idle: list[float] = []
        for _ in range(3 if short_every_s > 0 else 0):  # the short request's TTFT beside the streams only
            await short(idle)
        long_done = asyncio.Event()
        short_ttfts: list[float] = []
        shorts_task = asyncio.ensure_future(shorts(short_ttfts, long_done))
        t0 = time.perf_counter()
        async for _ in engine.generate(tokens(maker.make(long_len))[:long_len], SamplingParams(max_tokens=1)):
            break
        ttft_s = time.perf_counter() - t0
        long_done.set()
        await shorts_task
        stop.set()
        await asyncio.gather(*streams, return_exceptions=True)
        out = [{"t_s": round(t - t0, 3), **s} for t, s in steps if t0 <= t <= t0 + ttft_s + 0.5]
        out.append({"lanes": lanes, "long_ttft_s": round(ttft_s, 3), "short_ttft_ms_idle": idle,
                    "short_ttft_ms_during": short_ttfts, "coefficients": sched.budget.cost.coefficients})
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("on", "off"))
    p.add_argument("--long-len", type=int, default=3000)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--out", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--device", default="auto")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--short-every-s", type=float, default=0.0)
    args = p.parse_args()
    engine_kwargs = {"model": args.model, "device": args.device, "max_model_len": args.max_model_len}
    result = asyncio.run(run(args.mode == "on", args.long_len, args.streams, engine_kwargs, args.short_every_s))
    lines = [json.dumps(r) for r in result]
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n".join(lines[-3:]))


if __name__ == "__main__":
    main()
