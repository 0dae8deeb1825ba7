"""How long a grammar step's host share takes when another thread runs Python meanwhile (issue 44):
the GIL's cost on the path "previous step's tokens landed -> this step's masks queued".

    python -m lab.gil_handoff_probe [--rows 64] [--vocab 128256] [--busy-ms 0 3 6] [--repeat 30]

Each trial: a "loop" thread runs pure Python for `busy_ms` (what the event loop does with a step's
result: the scheduler's update, the emitter, the HTTP framing of B streams), starting at the same
moment as a "launch" thread that does the grammar's share of a step for `rows` constrained rows:
consume one token per matcher, fill their bitmask rows, then 16 small torch ops (what the masking
and the sampler queue). Reported: the launch thread's time from the start to its last op, median
over the trials, for each way of filling the masks:

  per_row    one llguidance call per row (each releases the GIL, so each may wait for it)
  executor   one LLExecutor call for every row (one release)
and with the interpreter's switch interval at its default (5 ms) and at 0.5 ms.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time

import llguidance
import torch

from bench.extra_body import PRESETS
from ingress.dummy_tokenizer import DummyTokenizer
from structured.llguidance_backend import LlguidanceBackend
from structured.llguidance_masks import fill_rows_parallel
from structured.tokenizer_bridge import ll_tokenizer, warm

SCHEMA = json.dumps(PRESETS["json_schema"]["response_format"]["json_schema"]["schema"])


def busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    x = 0
    while time.perf_counter() < end:
        for i in range(200):  # pure Python: holds the GIL but for the interpreter's forced switches
            x += i


def trial(mode: str, busy_ms: float, matchers, executor, bitmask, small: torch.Tensor) -> float:
    """From the moment the loop thread, already running Python, signals "tokens landed" (as the
    completer's `completed.set()` does while the event loop handles the step's result) to the launch
    thread's last op."""
    landed = threading.Event()
    signalled = []

    def loop() -> None:
        busy(0.2)  # the loop is running when the tokens land
        signalled.append(time.perf_counter())
        landed.set()
        busy(busy_ms)

    thread = threading.Thread(target=loop)
    thread.start()
    landed.wait()
    if mode == "per_row":
        for k, m in enumerate(matchers):
            v = bitmask[k]
            m.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * 4)
    else:
        fill_rows_parallel(executor, [(m, k) for k, m in enumerate(matchers)], bitmask)
    for _ in range(16):
        small = small + 1
    elapsed = (time.perf_counter() - signalled[0]) * 1e3
    thread.join()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.gil_handoff_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--busy-ms", type=float, nargs="+", default=[0.0, 3.0, 6.0])
    p.add_argument("--repeat", type=int, default=30)
    args = p.parse_args(argv)
    ll = ll_tokenizer(DummyTokenizer(args.vocab), args.vocab)
    warm(ll)
    compiled = LlguidanceBackend(ll).compile("json_schema", SCHEMA)
    matchers = [compiled.matcher()._m for _ in range(args.rows)]
    for m in matchers:  # into the first string: a mask with most of the vocabulary allowed
        for t in DummyTokenizer(args.vocab).encode('[{"name":"', add_special_tokens=False):
            m.consume_token(t)
    executor = llguidance.LLExecutor(num_threads=1)
    bitmask = torch.zeros((args.rows, (args.vocab + 31) // 32), dtype=torch.int32)
    small = torch.zeros(64)
    out = {}
    default = sys.getswitchinterval()
    try:
        for interval in (0.005, 0.0005):
            sys.setswitchinterval(interval)
            for busy_ms in args.busy_ms:
                for mode in ("per_row", "executor"):
                    times = [trial(mode, busy_ms, matchers, executor, bitmask, small) for _ in range(args.repeat)]
                    key = f"switch={interval * 1e3:g}ms busy={busy_ms:g}ms {mode}"
                    out[key] = round(statistics.median(times), 3)
                    print(key, out[key], file=sys.stderr, flush=True)
    finally:
        sys.setswitchinterval(default)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
