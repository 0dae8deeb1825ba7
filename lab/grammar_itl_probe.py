"""Where constrained decoding's inter-token latency goes, on CPU (issue 44): B streams through a whole
Engine (async scheduling on, as on a GPU), every one constrained by bench/extra_body.py's json_schema
preset, against the same B streams unconstrained; rounds rotate over the modes.

    python -m lab.grammar_itl_probe [--batch 64] [--vocab 8192] [--output-len 48] [--rounds 3]
                                    [--device-ms 8] [--modes plain constrained handover] [--out PATH]
                                    [--preset NAME] [--switch-interval-ms MS]

On a GPU: `--device-ms 0 --preset llama-3.1-8b --vocab` ignored; the same three modes, in one process.

The model is a dummy of the given vocabulary with a tiny body (hidden 64, 2 layers): the lm_head
and the sampler over B x vocab are the only model work, so the host's share of a step shows.

A simulated device (--device-ms F > 0): on a GPU a step's sampled ids land when the device has run
its forward (F ms, from its launch or from the previous step's end, whichever is later) and then
its sampling, which starts only once the host has queued it (the grammar's masks first). The probe
gives each step's copy back an event whose synchronize() sleeps until that time, so the completer
thread, the launch thread and the event loop interleave as they do beside a GPU (the CPU's own
compute of the tiny model stays on the launch thread, as host time). Modes: `plain` (no grammar),
`constrained` (GrammarHook.hand_over off: the launch thread's masks compete with the event loop
for the GIL, as before the hand-over), `handover` (on, as on a GPU now).

Timed by wrapping the engine's calls from outside (nothing in the packages knows about this probe):

  launch_ms     ModelRunner.launch, on the launch thread (on CPU it computes the step)
  sample_ms     Sampler.start within it (the logits processor, i.e. the grammar's share, included)
  wait_ms       a grammar step's wait for the previous step's tokens (GrammarStep.completed)
  fill_ms       the host bitmask fill of a step (host_rows .. to_device: catch-up excluded)
  catchup_ms    the matchers reading the previous step's tokens
  apply_ms      GrammarBitmask.apply (the masking itself; device work on a GPU)
  complete_ms   ModelRunner.complete, on the completer thread
  loop_lag_ms   how late the event loop runs a callback scheduled every 1 ms (its busy spans)
  itl_ms        per stream, the mean gap between outputs that carry tokens; the median over streams
  tpot_ms       per stream, (last output - first output) / (tokens - 1); the median over streams
  held_ms       (handover) how long a step's result was held for its successor's sampling
  critical_ms   (simulated device) from a step's ids landing to the next step's sampling queued, for
                the steps whose successor waited for them: the host path a GPU step cannot hide
                once it is longer than the forward

Each is the median over the round's steps (ITL: over its streams); the table shows the median over
rounds. JSON to stdout and to --out.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from collections import defaultdict

import numpy as np

from bench.extra_body import PRESETS
from gpu_stage.loaders import dummy_loader
from gpu_stage.model.config import ModelConfig
from gpu_stage.model_runner import ModelRunner
from gpu_stage.sampling.sampler import Sampler
from pipeline import Engine, EngineConfig
from stages.sampling import SamplingParams
from stages.structured import StructuredOutput
from structured import runner_hook
from structured.bitmask import GrammarBitmask
from structured.request_grammar import RequestGrammar

SCHEMA = json.dumps(PRESETS["json_schema"]["response_format"]["json_schema"]["schema"])
TIMES: dict[str, list[float]] = defaultdict(list)
_fill_start = threading.local()


class SimDevice:
    """The device's timeline: each step's forward, then its sampling once the host queued it.
    Also the host's critical path per step: from a step's ids landing (its event passed) to the
    next step's sampling queued, when that comes later (the next step was waiting for them)."""

    def __init__(self, forward_ms: float) -> None:
        self.forward_s = forward_ms / 1e3
        self.end_s = 0.0  # when the last queued step's sampled ids land
        self.launched_s = 0.0  # when the step being launched was launched
        self.landed: dict[int, float] = {}  # step (in launch order) -> when the completer saw its ids
        self.num_queued = 0

    def sampling_queued(self) -> "SimEvent":
        now = time.perf_counter()
        k, self.num_queued = self.num_queued, self.num_queued + 1
        previous = self.landed.pop(k - 1, None)
        if previous is not None and now > previous:
            TIMES["critical_ms"].append((now - previous) * 1e3)
        forward_end = max(self.launched_s, self.end_s) + self.forward_s
        self.end_s = max(forward_end, now)
        return SimEvent(self.end_s, k, self)


class SimEvent:
    def __init__(self, at_s: float, step: int, device: SimDevice) -> None:
        self.at_s, self.step, self.device = at_s, step, device

    def synchronize(self) -> None:
        wait = self.at_s - time.perf_counter()
        if wait > 0:
            time.sleep(wait)  # (releases the GIL, as a CUDA event's synchronize does)
        if self.step + 1 >= self.device.num_queued:  # the next step's sampling is not queued yet
            self.device.landed[self.step] = time.perf_counter()


def simulate_device(forward_ms: float) -> None:
    device = SimDevice(forward_ms)
    launch, copy = ModelRunner.launch, Sampler._copy_to_host

    def launch_sim(self, batch):
        device.launched_s = time.perf_counter()
        return launch(self, batch)

    def copy_sim(self, packed):
        packed, _ = copy(self, packed)
        return packed, device.sampling_queued()

    patch(ModelRunner, "launch", launch_sim)
    patch(Sampler, "_copy_to_host", copy_sim)


def time_hand_over() -> None:
    done = runner_hook.GrammarStep.done

    def done_t(self, result):
        t0 = time.perf_counter()
        held = self._waiter is not None
        done(self, result)
        if held:
            TIMES["held_ms"].append((time.perf_counter() - t0) * 1e3)

    patch(runner_hook.GrammarStep, "done", done_t)


_PATCHES: list[tuple[object, str, object]] = []  # (owner, name, original): what restore() puts back


def patch(owner, name: str, new) -> None:
    _PATCHES.append((owner, name, getattr(owner, name)))
    setattr(owner, name, new)


def restore() -> None:
    while _PATCHES:
        owner, name, original = _PATCHES.pop()
        setattr(owner, name, original)


def timed(owner, name: str, key: str) -> None:
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TIMES[key].append((time.perf_counter() - t0) * 1e3)

    patch(owner, name, wrapper)


class TimedEvent(threading.Event):
    def wait(self, timeout=None):
        t0 = time.perf_counter()
        try:
            return super().wait(timeout)
        finally:
            TIMES["wait_ms"].append((time.perf_counter() - t0) * 1e3)


def instrument() -> None:
    timed(ModelRunner, "launch", "launch_ms")
    timed(ModelRunner, "complete", "complete_ms")
    timed(Sampler, "start", "sample_ms")
    timed(RequestGrammar, "catch_up", "catchup_row_ms")
    timed(GrammarBitmask, "apply", "apply_ms")
    patch(runner_hook, "threading", type("T", (), {"Event": TimedEvent, "Lock": threading.Lock}))
    host_rows, to_device = GrammarBitmask.host_rows, GrammarBitmask.to_device

    def host_rows_t(self, n):
        _fill_start.t = time.perf_counter()
        return host_rows(self, n)

    def to_device_t(self, host):
        TIMES["fill_ms"].append((time.perf_counter() - _fill_start.t) * 1e3)
        return to_device(self, host)

    patch(GrammarBitmask, "host_rows", host_rows_t)
    patch(GrammarBitmask, "to_device", to_device_t)


async def loop_lag(stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        TIMES["loop_lag_ms"].append(max(0.0, (time.perf_counter() - t0) * 1e3 - 1.0))


async def stream(engine: Engine, prompt: list[int], params: SamplingParams) -> tuple[list[float], int, list[int]]:
    times, num_tokens, ids = [], 0, []
    async for out in engine.generate(prompt, params):
        if out.token_ids:
            times.append(time.perf_counter())
            num_tokens += len(out.token_ids)
            ids += out.token_ids
    return [b - a for a, b in zip(times, times[1:])], num_tokens, ids


async def one_round(engine: Engine, args: argparse.Namespace, mode: str, seed: int) -> dict:
    constrained = mode != "plain"
    engine.built.runner.hook.hand_over = mode == "handover"
    params = SamplingParams(max_tokens=args.output_len, temperature=0.0, ignore_eos=True,
                            structured=StructuredOutput("json_schema", SCHEMA) if constrained else None)
    rng = np.random.default_rng(seed)  # the same prompts for every mode of a round
    prompts = [rng.integers(300, args.vocab, 32).tolist() for _ in range(args.batch)]
    TIMES.clear()
    stop = asyncio.Event()
    lag = asyncio.create_task(loop_lag(stop))
    results = await asyncio.gather(*(stream(engine, p, params) for p in prompts))
    stop.set()
    await lag
    out = {k: statistics.median(v) for k, v in TIMES.items() if v and k != "catchup_row_ms"}
    if TIMES.get("catchup_row_ms"):
        out["catchup_ms"] = sum(TIMES["catchup_row_ms"]) / max(1, len(TIMES.get("fill_ms", [])) or 1)
    out["loop_lag_p90_ms"] = float(np.percentile(TIMES["loop_lag_ms"], 90)) if TIMES["loop_lag_ms"] else 0.0
    out["itl_ms"] = statistics.median(statistics.fmean(g) * 1e3 for g, _, _ in results if g)
    out["tpot_ms"] = statistics.median(sum(g) * 1e3 / (n - 1) for g, n, _ in results if n > 1)
    out["outputs_per_token"] = sum(len(g) + 1 for g, _, _ in results) / sum(n for _, n, _ in results)
    if constrained:  # every constrained output so far parses as the schema's prefix: check the text
        text = engine.built.tokenizer.decode(results[0][2])
        out["sample_text"] = text[:60]
    return out


async def main_async(args: argparse.Namespace) -> dict:
    name = args.preset or f"probe-{args.vocab}"
    if args.preset is None:
        dummy_loader.PRESETS[name] = ModelConfig(
            architecture="llama", vocab_size=args.vocab, hidden_size=64, intermediate_size=128, num_layers=2,
            num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=2048, tie_word_embeddings=True)
    args.vocab = dummy_loader.PRESETS[name].vocab_size
    default_interval = sys.getswitchinterval()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    instrument()
    time_hand_over()
    if args.device_ms > 0:
        simulate_device(args.device_ms)
    config = EngineConfig(model=f"dummy:{name}", num_kv_blocks=args.batch * 8 + 64, max_model_len=256,
                          max_num_seqs=args.batch, async_scheduling=True, cpu_threads=args.threads)
    modes = args.modes
    rounds: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        async with Engine(config) as engine:
            await one_round(engine, argparse.Namespace(**{**vars(args), "batch": 2, "output_len": 4}), "handover", 0)
            for r in range(args.rounds):
                for mode in modes[r % len(modes):] + modes[: r % len(modes)]:  # rotate: no mode always first
                    res = await one_round(engine, args, mode, 1 + r)
                    rounds[mode].append(res)
                    print(mode, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in res.items()},
                          file=sys.stderr, flush=True)
    finally:
        restore()
        sys.setswitchinterval(default_interval)
        if args.preset is None:
            dummy_loader.PRESETS.pop(name, None)
    summary: dict[str, dict] = {}
    for mode, rs in rounds.items():
        keys = sorted({k for r in rs for k, v in r.items() if isinstance(v, float)})
        summary[mode] = {k: statistics.median(r[k] for r in rs if k in r) for k in keys}
    if "plain" in summary:
        for mode in summary:
            summary[mode]["tpot_ratio"] = summary[mode]["tpot_ms"] / summary["plain"]["tpot_ms"]
            summary[mode]["itl_ratio"] = summary[mode]["itl_ms"] / summary["plain"]["itl_ms"]
    return {"args": vars(args), "rounds": rounds, "median": summary}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.grammar_itl_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--output-len", type=int, default=48)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the launch thread")
    p.add_argument("--device-ms", type=float, default=8.0, help="simulated forward per step (0: none: the real "
                                                                  "device's, e.g. on a GPU)")
    p.add_argument("--preset", default=None, help="a dummy preset (e.g. llama-3.1-8b on a GPU) instead of the "
                                                  "tiny body with --vocab")
    p.add_argument("--switch-interval-ms", type=float, default=None, help="sys.setswitchinterval (default: 5 ms)")
    p.add_argument("--modes", nargs="+", default=["plain", "constrained", "handover"],
                   choices=("plain", "constrained", "handover"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    result = asyncio.run(main_async(args))
    text = json.dumps(result, indent=1)
    print(json.dumps(result["median"], indent=1))
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
