"""Paired A/B of lab.host_step_cost: another source tree's harness and this tree's, in one
process, stepped in turn.

    python -m lab.host_step_cost_ab BASE_DIR [--seqs 8 64] [--context 2048] [--steps 256]
                                      [--warmup 32] [--tokenizer smollm2|dummy] [--evict-mb MB] [--out PATH]

On a shared VM the time other guests steal comes in bursts that move whole runs by tens of
percent, more than a change to the host path does; stepping both harnesses alternately puts them
under the same bursts. BASE_DIR is a copy of the other tree that has lab/host_step_cost.py, or
bench/host_step_cost.py before it moved (`git archive REV | tar -x -C BASE_DIR`). For each N and
async setting: each phase's median step for both trees, and the median over the steps of this
tree's time over the base's (below 1: faster). Both trees must produce the same output digest (the
same batches, events and SSE bytes), else it fails. Run it as its own process: it loads the project's packages twice.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import statistics
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from lab.host_step_cost import PHASES, CacheEvictor, add_size_args, max_tokens_for, write_report

PACKAGES = ("bench", "emitter", "gpu_stage", "ingress", "lab", "pipeline", "scheduler", "stages")
THIS_TREE = Path(__file__).resolve().parents[1]


def load_tree(root: Path) -> ModuleType:
    """The tree at `root`'s host_step_cost (lab/, or bench/ in trees before the move), with its own
    copies of the packages."""
    for name in list(sys.modules):
        if name.split(".")[0] in PACKAGES:
            del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        home = "lab" if (root / "lab" / "host_step_cost.py").exists() else "bench"
        module = importlib.import_module(f"{home}.host_step_cost")
    finally:
        sys.path.remove(str(root))
    assert Path(module.__file__).resolve().is_relative_to(root.resolve()), module.__file__
    return module


def compare(trees: tuple[ModuleType, ModuleType], tokenizer: str, num_seqs: int, context: int,
            steps: int, warmup: int, async_scheduling: bool, evict: CacheEvictor = CacheEvictor(0)) -> dict[str, Any]:
    """One N and async setting: the base tree's and this tree's steps, taken in turn."""
    harnesses = []
    for tree in trees:
        tok = tree.load_tokenizer(tokenizer)
        max_tokens = max_tokens_for(num_seqs, context, warmup + steps)
        h = tree.StepHarness(tok, num_seqs, context, max_tokens, async_scheduling)
        h.prefill()
        harnesses.append(h)
    base, this = harnesses
    for _ in range(warmup):
        base.step()
        this.step()
    gc.collect()
    pairs = []
    for _ in range(steps):
        evict()
        b = base.step()
        evict()
        pairs.append((b, this.step()))
    assert base.digest.digest() == this.digest.digest(), "the two trees produced different outputs"
    row: dict[str, Any] = {"num_seqs": num_seqs, "async_scheduling": async_scheduling}
    for phase in PHASES + ("total",):
        def of(t: dict[str, int]) -> int:
            return sum(t[p] for p in PHASES) if phase == "total" else t[phase]
        row[phase] = {
            "base_us_per_step": round(statistics.median(of(b) for b, _ in pairs) / 1e3, 2),
            "this_us_per_step": round(statistics.median(of(t) for _, t in pairs) / 1e3, 2),
            "ratio": round(statistics.median(of(t) / of(b) for b, t in pairs), 3),
        }
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.host_step_cost_ab", description=__doc__.split("\n")[0])
    p.add_argument("base_dir", type=Path)
    add_size_args(p)
    a = p.parse_args(argv)
    trees = (load_tree(a.base_dir), load_tree(THIS_TREE))
    evict = CacheEvictor(a.evict_mb)
    rows = [compare(trees, a.tokenizer, n, a.context, a.steps, a.warmup, async_on, evict)
            for n in a.seqs for async_on in (False, True)]
    write_report({"base_dir": str(a.base_dir), "context": a.context, "steps": a.steps, "warmup": a.warmup,
                  "evict_mb": a.evict_mb,
                  "tokenizer": a.tokenizer, "rows": rows}, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
