"""reference_table: P50/P95 over a run's samples, the P50 per prompt length, and the traces' wait
and prefill per length."""
from __future__ import annotations

import json
from pathlib import Path

from lab.reference_table import main, run_row, trace_row


def _write_run(root: Path) -> Path:
    cfg = root / "base"
    cfg.mkdir()
    samples = [{"prompt_len": n, "ttft_s": t / 1e3, "success": True}
               for n, t in ((512, 20), (512, 30), (1024, 50), (2048, 80), (4096, 160), (4096, 170))]
    samples.append({"prompt_len": 512, "ttft_s": 9.0, "success": False})  # a failure is not a TTFT
    (cfg / "20261130T000000-run1-c8.json").write_text(json.dumps({"samples": samples}))
    traces = [{"info": {"num_prompt_tokens": 2048},
               "edges_ms": {"queued": 1.0, "first_scheduled": 30.0, "prefill_done": 83.0}}]
    (cfg / "traces_run1.json").write_text(json.dumps({"traces": traces}))
    return cfg


def test_rows_from_samples_and_traces(tmp_path: Path, capsys) -> None:
    cfg = _write_run(tmp_path)
    row = run_row(next(cfg.glob("*-run1-c8.json")))
    assert row["n"] == 6 and row[512] == 25.0 and row[4096] == 165.0 and row["p50"] == 65.0
    t = trace_row(cfg / "traces_run1.json")
    assert (t["wait2048"], t["prefill2048"]) == (29.0, 53.0)
    assert main([str(tmp_path)]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith("| base | run1 | 65.0 |") and "29.0 / 53.0" in line
