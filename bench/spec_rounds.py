"""Where a draft_model round's time goes (bench/spec_gpu.py): a speculative round at batch 1 is the
draft's first forward of the step (catch-up: the next input, and after a full acceptance the last
guess the draft never read), its k - 1 guessing decodes, and the target's verification; between
rounds the host completes the step, schedules the next and stages it (no async scheduling with
speculation). RoundTimer wraps those calls of a built Engine's runner and draft with CUDA events
(GPU time from the call's first launch to its last kernel) and host clocks, and `summary` gives
per-round means: catch-up, draft steps, verify, the round's wall time and what is left (host gaps).
On CPU the spans are host times (the work is synchronous). Measurement only: it changes no result."""
from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from gpu_stage.spec.verifier import draft_of


class RoundTimer:
    def __init__(self, runner, cuda: bool) -> None:
        self.runner, self.draft, self.cuda = runner, draft_of(runner.hook), cuda
        self.rounds: list[dict] = []  # per draft.guess call: its start, host time, spans
        self._originals: list[tuple[object, str]] = []

    def install(self) -> None:
        draft = self.draft
        guess = draft.guess

        def timed_guess(chunks, states):
            self.rounds.append({"start": time.perf_counter(), "spans": [], "verifying": False})
            out = guess(chunks, states)
            self.rounds[-1]["guess_host_ms"] = 1e3 * (time.perf_counter() - self.rounds[-1]["start"])
            self.rounds[-1]["verifying"] = out is not None
            return out

        self._wrap(draft, "guess", timed_guess)
        self._wrap(draft, "_catch_up", self._spanned(draft._catch_up, lambda *a: "catch_up"))
        self._wrap(draft, "_decode", self._spanned(draft._decode, lambda *a: "draft_step"))
        if self.runner.graphs is not None:
            self._wrap(self.runner.graphs, "replay", self._spanned(self.runner.graphs.replay, lambda *a: "verify"))
        self._wrap(self.runner, "_forward", self._spanned(self.runner._forward, lambda *a: "verify"))

    def remove(self) -> None:
        for obj, name in reversed(self._originals):
            delattr(obj, name)  # the instance attribute: the class's method shows again
        self._originals.clear()

    def _wrap(self, obj: object, name: str, fn: Callable) -> None:
        setattr(obj, name, fn)
        self._originals.append((obj, name))

    def _spanned(self, fn: Callable, label: Callable[..., str]) -> Callable:
        def call(*args, **kw):
            with self._span(label(*args)):
                return fn(*args, **kw)
        return call

    @contextmanager
    def _span(self, name: str) -> Iterator[None]:
        if not self.rounds:  # before the first guess (nothing to attribute it to)
            yield
            return
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.rounds[-1]["spans"].append((name, start, end))
        else:
            t0 = time.perf_counter()
            yield
            self.rounds[-1]["spans"].append((name, t0, time.perf_counter()))

    def summary(self, num_tokens: int) -> dict:
        """Per-round means over the verifying rounds that a next round followed (its wall time is
        the gap between their starts); `num_tokens`: the output tokens the verifying rounds emitted
        (a reply's first token comes from its prefill, not a round)."""
        if self.cuda:
            torch.cuda.synchronize()
        per: dict[str, list[float]] = {"catch_up_ms": [], "draft_steps_ms": [], "draft_step_ms": [], "verify_ms": [],
                                       "round_ms": [], "guess_host_ms": []}
        for this, nxt in zip(self.rounds, self.rounds[1:]):
            if not (this["verifying"] and nxt["verifying"]):
                continue
            ms = {"catch_up": [], "draft_step": [], "verify": []}
            for name, start, end in this["spans"]:
                ms[name].append(start.elapsed_time(end) if self.cuda else 1e3 * (end - start))
            per["catch_up_ms"].append(sum(ms["catch_up"]))
            per["draft_steps_ms"].append(sum(ms["draft_step"]))
            per["draft_step_ms"] += ms["draft_step"]
            per["verify_ms"].append(sum(ms["verify"]))
            per["round_ms"].append(1e3 * (nxt["start"] - this["start"]))
            per["guess_host_ms"].append(this["guess_host_ms"])
        if not per["round_ms"]:
            return {"rounds": 0}
        out = {name: statistics.mean(v) for name, v in per.items() if v}
        out["draft_steps_per_round"] = len(per["draft_step_ms"]) / len(per["round_ms"])
        out["other_ms"] = out["round_ms"] - out["catch_up_ms"] - out["draft_steps_ms"] - out["verify_ms"]
        out["rounds"] = len(per["round_ms"])
        verifying = sum(r["verifying"] for r in self.rounds)
        out["tokens_per_round"] = num_tokens / verifying if verifying else None
        return out


def breakdown_line(b: dict, k: int) -> str:
    """One line of spec_gpu.md."""
    if not b.get("rounds"):
        return "\ndraft_model round breakdown: no verifying rounds measured"
    return (f"\ndraft_model round breakdown (batch 1, k={k}, {b['rounds']} rounds, {b['tokens_per_round']:.2f} tokens "
            f"per round): round {b['round_ms']:.2f} ms = catch-up {b['catch_up_ms']:.2f} + draft steps "
            f"{b['draft_steps_ms']:.2f} ({b['draft_steps_per_round']:.1f} x {b.get('draft_step_ms', 0.0):.2f}) + verify "
            f"{b['verify_ms']:.2f} + other (host: complete, schedule, stage) {b['other_ms']:.2f}; the draft's host "
            f"time per round {b['guess_host_ms']:.2f} ms (GPU spans from each call's first launch)")
