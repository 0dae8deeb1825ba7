"""`ttft serve` with every model step written to a JSON-lines log: what each step carried and how long
it took, to see whether decode steps carry prefill chunks, and how large.

    python -m lab.cpu_step_log STEPS.jsonl -- [ttft serve flags]

One line per step: {"step", "t_s" (launch, since the first step), "ms" (launch to sampled ids),
"decodes" (one-token chunks), "prefill" (the other chunks' sizes), "ctx" (longest context)}.
`python -m lab.cpu_step_log --summary STEPS.jsonl` prints the split: decode-only steps against
steps with prefill chunks (count, median ms, the decodes they held), and the chunk sizes.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

from gpu_stage.model_runner import ModelRunner


def install(path: str) -> None:
    """Wrap ModelRunner.launch/complete so that each step appends a line to `path`."""
    out = open(path, "a", buffering=1)
    t_first: list[int] = []
    launch, complete = ModelRunner.launch, ModelRunner.complete

    def logged_launch(self, batch):
        launched = launch(self, batch)
        sizes = [len(c.token_ids) for c in batch.chunks]
        launched.log_info = {  # type: ignore[attr-defined]
            "step": batch.step_id, "decodes": sum(1 for n in sizes if n == 1),
            "prefill": [n for n in sizes if n > 1],
            "ctx": max((c.start_pos + len(c.token_ids) for c in batch.chunks), default=0),
        }
        return launched

    def logged_complete(self, launched):
        result = complete(self, launched)
        info = getattr(launched, "log_info", None)
        if info is not None and (info["decodes"] or info["prefill"]):
            t_first.append(launched.started_ns) if not t_first else None
            info["t_s"] = round((launched.started_ns - t_first[0]) / 1e9, 4)
            info["ms"] = round((time.perf_counter_ns() - launched.started_ns) / 1e6, 2)
            out.write(json.dumps(info) + "\n")
        return result

    ModelRunner.launch, ModelRunner.complete = logged_launch, logged_complete


def summary(path: str) -> dict:
    steps = [json.loads(line) for line in open(path) if line.strip()]
    pure = [s for s in steps if not s["prefill"]]
    mixed = [s for s in steps if s["prefill"]]

    def med(rows, key):
        return round(statistics.median(r[key] for r in rows), 1) if rows else None

    chunks = [n for s in mixed for n in s["prefill"]]
    return {
        "steps": len(steps),
        "decode_only": {"n": len(pure), "median_ms": med(pure, "ms"),
                        "median_decodes": statistics.median([s["decodes"] for s in pure]) if pure else None},
        "with_prefill": {"n": len(mixed), "median_ms": med(mixed, "ms"),
                         "with_decodes": sum(1 for s in mixed if s["decodes"]),
                         "median_decodes": statistics.median([s["decodes"] for s in mixed]) if mixed else None},
        "chunk_sizes": {"n": len(chunks), "median": statistics.median(chunks) if chunks else None,
                        "max": max(chunks, default=None)},
        # The share of decode tokens that waited on a step carrying prefill work: the ITL gaps it slows.
        "decode_tokens_in_prefill_steps": round(sum(s["decodes"] for s in mixed)
                                                / max(1, sum(s["decodes"] for s in steps)), 3),
    }


def main(argv: list[str]) -> int:
    if argv[:1] == ["--summary"]:
        print(json.dumps(summary(argv[1]), indent=1))
        return 0
    if len(argv) < 2 or argv[1] != "--":
        print(__doc__)
        return 2
    install(argv[0])
    from pipeline.cli import main as cli_main
    return cli_main(["serve", *argv[2:]])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
