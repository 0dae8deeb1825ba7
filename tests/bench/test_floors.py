"""bench/floors.py: the floors of ../shared/PERFORMANCE.md from the model's shape, and the table."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.floors import annotate, floors, targets_table
from gpu_stage.loaders.dummy_loader import dummy_preset


def test_floors_reproduce_the_published_table() -> None:
    # PERFORMANCE.md at 790 TFLOP/s and 4.3 TB/s: TTFT 3.5 / 37.6 / 167 ms, decode 3.5 ms (b1) and
    # 7.5 ms (B=64, C=2048), prefill 54.5k tokens/s with attention.
    f = floors(dummy_preset("llama-3.1-8b"), 790.0, 4.3)
    ms = f["floors_ms"]
    assert ms["ttft_p50_ms_128"] == pytest.approx(3.5, rel=0.01)
    assert ms["ttft_p50_ms_2048"] == pytest.approx(37.6, rel=0.01)
    assert ms["ttft_p50_ms_8192"] == pytest.approx(167.0, rel=0.01)
    assert ms["itl_p50_ms_b1"] == pytest.approx(3.5, rel=0.01)
    assert ms["itl_p50_ms_b64_ctx2048"] == pytest.approx(7.5, rel=0.01)
    assert f["prefill_tok_per_s_floor"] == pytest.approx(54_500, rel=0.01)


def test_table_marks_met_and_missed_with_ratios() -> None:
    summary = annotate({"gemm_tflops": 790.0, "copy_tbps": 4.3, "ttft_p50_ms_2048": 48.6, "itl_p50_ms_b1": 4.1,
                        "prefill_tok_per_s": 48_500.0}, dummy_preset("llama-3.1-8b"))
    rows = {line.split(" | ")[0].strip("| "): line for line in targets_table(summary).splitlines()[2:]}
    assert set(rows) == {"ttft_p50_ms_2048", "itl_p50_ms_b1", "prefill_tok_per_s"}
    assert "| no |" in rows["ttft_p50_ms_2048"] and "1.293" in rows["ttft_p50_ms_2048"]  # 48.6 / 37.58
    assert "| yes |" in rows["itl_p50_ms_b1"]
    assert "| yes |" in rows["prefill_tok_per_s"] and "0.890" in rows["prefill_tok_per_s"]


def test_command_annotates_the_summary_in_place(tmp_path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"gemm_tflops": 785.0, "copy_tbps": 4.24, "ttft_p50_ms_128": 7.4}))
    subprocess.run([sys.executable, "-m", "bench.floors", str(path)], check=True, capture_output=True)
    data = json.loads(path.read_text())
    assert data["ratio_to_floor"]["ttft_p50_ms_128"] == pytest.approx(7.4 / data["floors_ms"]["ttft_p50_ms_128"])
    assert "| ttft_p50_ms_128 | 7.40 | <= 8 | yes |" in (tmp_path / "summary.md").read_text()
