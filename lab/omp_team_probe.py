"""Why a CPU server's steps were slow on its launch thread (issue 28): libgomp throttles spinning
once it manages more threads than the host has cores.

    GOMP_SPINCOUNT=20000 python -m lab.omp_team_probe      (also try OMP_WAIT_POLICY=PASSIVE)

Times one small product (1 x 576 @ 576 x 1536, SmolLM2's gate/up shape: one parallel region) on
2 torch threads, in three places: a thread that is the first to run parallel torch work in the
process; the main thread; and a second thread while the main thread's OpenMP team still exists
(its worker asleep in the pool). On the 2-core VM (2026-12-06, spin 20,000): 36-40 us, 37 us, and
104-150 us: with 4 pooled threads on 2 cores libgomp's workers sleep at once (its throttled spin
count), and every region pays two futex wake-ups (~40 us each on that VM). The server's model was
built on an executor thread that stayed alive with its team, so every step ran like the third case.
"""
from __future__ import annotations

import threading
import time

import torch


def region_us(reps: int = 2000) -> float:
    x, w = torch.randn(1, 576), torch.randn(576, 1536)
    for _ in range(50):
        x @ w
    t0 = time.perf_counter()
    for _ in range(reps):
        x @ w
    return (time.perf_counter() - t0) / reps * 1e6


def on_thread(label: str) -> None:
    out: dict[str, float] = {}
    thread = threading.Thread(target=lambda: out.update(us=region_us()))
    thread.start()
    thread.join()
    print(f"{label:52s} {out['us']:7.1f} us", flush=True)


def main() -> None:
    torch.set_num_threads(2)
    on_thread("a thread, no other team in the process")
    print(f"{'the main thread (its team now lives on)':52s} {region_us():7.1f} us", flush=True)
    on_thread("a second thread beside the main thread's team")


if __name__ == "__main__":
    main()
