"""Does a long prefill run at a lower clock? `python lab/prefill_clocks.py OUTDIR`

An 8,192-token prefill step's products run at ~711 TFLOP/s against ~775 in a 2,048-token step
(bench/results/20261130-NVIDIA-H200/s6-*/profile.log), and row blocks of 2,048 do not recover it
(s6-rowblocks-*): a sign of the power limit rather than of cuBLAS's kernel choice. This runs
phases of prefill steps through ModelRunner (Llama-3-8B shape, eager, after the server's warm-up):
1x2048, 1x8192, 4x2048, 1x2048 again, each for ~3 s, while `nvidia-smi` samples the SM clock and
the board power every 20 ms into OUTDIR/smi.csv; prints each phase's median step time, SM clock
and power.
"""
from __future__ import annotations

import statistics
from datetime import datetime
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gpu_prefill import BLOCK_SIZE, FIXED_BLOCKS, MODEL, Bench  # noqa: E402
from gpu_stage.loaders import load_model_source  # noqa: E402
from gpu_stage.model_runner import ModelRunner  # noqa: E402

PHASES = ((1, 2048), (1, 8192), (4, 2048), (1, 2048))  # (prompts, tokens each)
PHASE_S = 3.0


def samples_between(rows: list[tuple[float, float, float]], t0: float, t1: float) -> tuple[float, float]:
    inside = [(mhz, watts) for t, mhz, watts in rows if t0 <= t <= t1]
    if not inside:
        return float("nan"), float("nan")
    return statistics.median(m for m, _ in inside), statistics.median(w for _, w in inside)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    source = load_model_source(MODEL, seed=0)
    runner = ModelRunner.build(source, "cuda", torch.bfloat16, FIXED_BLOCKS, BLOCK_SIZE, max_num_batched_tokens=8192,
                               max_num_seqs=64, attention_backend="triton", enforce_eager=True, max_model_len=8192)
    runner.warm_thread()
    bench = Bench(runner, source.config.vocab_size)
    smi_file = (out / "smi.csv").open("w")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "20"], stdout=smi_file)
    stamps = []
    try:
        time.sleep(1.0)
        for prompts, tokens in PHASES:
            t0, times = time.time(), []
            while time.time() - t0 < PHASE_S:
                times.extend(bench.prefill_ms(tokens, 1, prompts))
            stamps.append((prompts, tokens, t0 + 0.5, time.time(), statistics.median(times)))
        time.sleep(0.5)
    finally:
        smi.terminate()
        smi.wait()
        smi_file.close()
    rows = []
    for line in (out / "smi.csv").read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:  # e.g. "2026/11/30 11:09:32.123, 1980, 650.12"
            when = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((when, float(parts[1]), float(parts[2])))
    print(f"{'step':>8s} {'ms':>8s} {'SM MHz':>8s} {'W':>7s}")
    for prompts, tokens, t0, t1, ms in stamps:
        mhz, watts = samples_between(rows, t0, t1)
        print(f"{prompts}x{tokens:<6d} {ms:8.2f} {mhz:8.0f} {watts:7.1f}", flush=True)


if __name__ == "__main__":
    main()
