"""The grammar ITL probes of issue 44 at a tiny size: lab.grammar_itl_probe (a whole engine, every
mode, the simulated device; the classes it patches are put back), lab.gil_handoff_probe (which puts
the interpreter's switch interval back) and lab.bitmask_apply_ab."""
from __future__ import annotations

import json
import sys

import pytest

from gpu_stage.model_runner import ModelRunner
from gpu_stage.sampling.sampler import Sampler
from lab import bitmask_apply_ab, gil_handoff_probe, grammar_itl_probe
from structured import runner_hook
from structured.runner_hook import GrammarStep


def test_the_itl_probe_times_every_mode_and_puts_the_engine_back(tmp_path):
    out = tmp_path / "probe.json"
    originals = (ModelRunner.launch, Sampler._copy_to_host, GrammarStep.done, runner_hook.threading)
    assert grammar_itl_probe.main(["--batch", "3", "--vocab", "512", "--output-len", "6", "--rounds", "1",
                                   "--device-ms", "2", "--out", str(out)]) == 0
    assert (ModelRunner.launch, Sampler._copy_to_host, GrammarStep.done, runner_hook.threading) == originals
    median = json.loads(out.read_text())["median"]
    assert set(median) == {"plain", "constrained", "handover"}
    for mode, row in median.items():
        assert row["tpot_ms"] > 0 and row["itl_ms"] > 0 and row["launch_ms"] > 0, mode
    assert median["plain"]["tpot_ratio"] == 1.0
    assert median["constrained"]["fill_ms"] > 0 and "fill_ms" not in median["plain"]


def test_the_itl_probe_refuses_an_unknown_mode(capsys):
    with pytest.raises(SystemExit) as info:
        grammar_itl_probe.main(["--modes", "fast"])
    assert info.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_the_gil_probe_reports_both_fills_at_both_intervals_and_puts_the_interval_back(capsys):
    before = sys.getswitchinterval()
    assert gil_handoff_probe.main(["--rows", "2", "--vocab", "512", "--busy-ms", "0", "--repeat", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result) == 4 and all(v > 0 for v in result.values())
    assert sys.getswitchinterval() == before


def test_the_apply_ab_checks_both_versions_agree_and_times_them(capsys):
    assert bitmask_apply_ab.main(["--rows", "3", "--vocab", "100", "--repeat", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["median_ms"]) == {"before", "after_every_row", "after_row_index"}
