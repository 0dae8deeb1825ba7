"""lab/cpu_stall_sim: on vLLM's 256-in row (simulated), the decode ratio brings the ITL P95 within 2x
its P50 where the plain budget leaves it far above, and pays for it in the P50 and the first tokens."""
from __future__ import annotations

from lab.cpu_stall_sim import simulate


def test_the_decode_ratio_trades_the_p50_for_the_p95() -> None:
    off = simulate(1500.0, 0.0, seed=0, noise=0.0, num_requests=12)
    on = simulate(1500.0, 1.8, seed=0, noise=0.0, num_requests=12)
    assert off["p95_over_p50"] > 3.0 and on["p95_over_p50"] < 2.0
    assert on["itl_p50"] >= off["itl_p50"] and on["ttft_p50"] > off["ttft_p50"]
