"""lab/skinny_gemm_gpu.py: its arguments, its refusal without a GPU, and its whole path on tiny shapes
(a dry run: Triton's interpreter on the CPU, wall-clock times), JSON and Markdown written."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.skinny_gemm_gpu import main, parse_args

ROOT = Path(__file__).resolve().parents[2]


def test_the_arguments_and_their_defaults(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(["--help"])
    assert exc.value.code == 0 and "--dry-run" in capsys.readouterr().out
    args = parse_args(["--out", "x"])
    assert args.rows is None and args.products is None and not args.dry_run
    for bad in (["--out", "x", "--rows", "0"], ["--out", "x", "--rows", "513"], ["--out", "x", "--products", "mlp"],
                ["--rows", "8"]):
        with pytest.raises(SystemExit) as exc:
            parse_args(bad)
        assert exc.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="refuses only where there is no GPU")
def test_without_a_gpu_it_asks_for_a_dry_run(tmp_path, capsys) -> None:
    assert main(["--out", str(tmp_path)]) == 2
    assert "use --dry-run" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_dry_run_times_both_paths_and_checks_the_bits(tmp_path) -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "lab/skinny_gemm_gpu.py", "--out", str(tmp_path), "--dry-run",
                          "--products", "o", "--rows", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads((tmp_path / "skinny_gemm.json").read_text())
    (row,) = result["rows"]
    assert (row["product"], row["rows"], row["bucket"]) == ("o", 2, 16)
    assert row["cublas_us"] > 0 and row["served_us"] > 0 and row["best"] in row["skinny_us"]
    assert len(row["skinny_us"]) == 3  # served, split flipped, the other BLOCK_N
    assert row["skinny_rel_err"] < 1e-2
    assert result["invariance"]["o"] == {"8": {"row_alone_equals_batch": True, "split_equals_not": True,
                                             "deterministic": True}}
    assert "| o | 2 |" in (tmp_path / "skinny_gemm.md").read_text()
