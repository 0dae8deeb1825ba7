"""lab/trace_steps.py: kernels per step, graph launches and the host's chain from a trace."""
from __future__ import annotations

from lab.trace_steps import analyze


def rt(name: str, ts: float, dur: float, tid: int) -> dict:
    return {"cat": "cuda_runtime", "ph": "X", "name": name, "ts": ts, "dur": dur, "tid": tid}


def kernel(name: str, ts: float, dur: float) -> dict:
    return {"cat": "kernel", "ph": "X", "name": name, "ts": ts, "dur": dur}


def test_steps_kernels_and_the_host_chain() -> None:
    events = [
        rt("cudaEventSynchronize", 0, 1000, 2),     # a result at 1,000 us (completion thread 2)
        rt("cudaEventSynchronize", 1100, 20, 1),    # the launch thread's own short sync: not a result
        rt("cudaGraphLaunch", 4000, 500, 1),        # 3,000 us after the result
        rt("cudaEventSynchronize", 1000, 9000, 2),  # the next result at 10,000
        rt("cudaGraphLaunch", 14000, 700, 1),       # 4,000 us after it
        kernel("attn", 4500, 3000), kernel("gemm", 7500, 2000), kernel("attn", 14700, 3000),
    ]
    out = analyze(events)
    assert out["num_steps"] == 2
    assert out["kernels_ms_per_step"] == {"attn": 3.0, "gemm": 1.0} and out["all_device_ms_per_step"] == 4.0
    assert out["host_chain"] == {"median_ms": 4.0, "p10_ms": 3.0, "p90_ms": 4.0, "max_ms": 4.0}
    assert out["graph_launch"]["max_ms"] == 0.7 and out["launch_period"]["median_ms"] == 10.0


def test_too_few_launches() -> None:
    assert analyze([rt("cudaGraphLaunch", 0, 5, 1)]) == {"num_steps": 1}
