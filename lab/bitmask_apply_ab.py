"""The grammar mask's application on CPU, before and after structured/bitmask.py read the words as
bytes (issue 44): B rows of a V-id vocabulary, every row masked, alternating the two, medians.

    python -m lab.bitmask_apply_ab [--rows 64] [--vocab 128256] [--repeat 9] [--threads 1]

`before` is the former code, kept here for the comparison: 32 int32 shifts per word, then a gather
of the rows and a scatter back. Both give the same logits (checked first). On a GPU the same
change cuts the [rows, vocab] intermediates from two int32 and one bool to one uint8 and one bool,
and drops the gather and the scatter when every row is masked; its device time there is not
measured here.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from structured.bitmask import apply_bitmask


def before(logits: torch.Tensor, rows: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    shifts = torch.arange(32, dtype=torch.int32)
    allowed = ((bits.unsqueeze(-1) >> shifts) & 1).bool().reshape(bits.shape[0], -1)[:, : logits.shape[1]]
    masked = logits.index_select(0, rows).masked_fill(~allowed, float("-inf"))
    return logits.index_copy(0, rows, masked)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bitmask_apply_ab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(args.rows, args.vocab, generator=gen)
    bits = torch.randint(-2**31, 2**31 - 1, (args.rows, (args.vocab + 31) // 32), dtype=torch.int32, generator=gen)
    rows = torch.arange(args.rows)
    assert torch.equal(before(logits, rows, bits), apply_bitmask(logits, None, bits))
    assert torch.equal(before(logits, rows, bits), apply_bitmask(logits, rows, bits))
    variants = {"before": lambda: before(logits, rows, bits), "after_every_row": lambda: apply_bitmask(logits, None, bits),
                "after_row_index": lambda: apply_bitmask(logits, rows, bits)}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):
        for name, fn in variants.items():  # alternating: a burst of load hits all of them
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) * 1e3)
    out = {"args": vars(args), "median_ms": {k: round(statistics.median(v), 2) for k, v in times.items()}}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
