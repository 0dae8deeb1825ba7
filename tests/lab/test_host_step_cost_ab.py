"""lab.host_step_cost_ab: two trees' harnesses stepped in turn, their outputs checked equal."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from lab import host_step_cost
from lab.host_step_cost_ab import PHASES, THIS_TREE, compare


def test_compare_pairs_the_steps_and_rejects_different_outputs() -> None:
    row = compare((host_step_cost, host_step_cost), "dummy", 2, context=48, steps=4, warmup=1,
                  async_scheduling=True)
    for phase in PHASES + ("total",):
        assert row[phase]["base_us_per_step"] > 0 and row[phase]["this_us_per_step"] > 0
        assert row[phase]["ratio"] > 0
    other = SimpleNamespace(load_tokenizer=host_step_cost.load_tokenizer,
                            StepHarness=functools.partial(host_step_cost.StepHarness, seed=1))
    with pytest.raises(AssertionError, match="different outputs"):
        compare((host_step_cost, other), "dummy", 2, context=48, steps=4, warmup=1, async_scheduling=False)


def test_main_loads_both_trees_in_its_own_process(tmp_path) -> None:
    out = tmp_path / "ab.json"
    subprocess.run([sys.executable, "-m", "lab.host_step_cost_ab", str(THIS_TREE), "--tokenizer", "dummy",
                    "--seqs", "2", "--context", "32", "--steps", "3", "--warmup", "1", "--out", str(out)],
                   cwd=THIS_TREE, check=True, capture_output=True)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["num_seqs"], r["async_scheduling"]) for r in rows] == [(2, False), (2, True)]
    assert all(r["total"]["ratio"] > 0 for r in rows)
