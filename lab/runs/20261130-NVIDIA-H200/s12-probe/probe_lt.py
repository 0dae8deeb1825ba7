"""Probe (twelfth session): every cuBLASLt algorithm the heuristic offers for the model's products,
timed sustained (the board at its power limit) against torch's F.linear. ctypes on libcublasLt.
(Ran as one file; its library half is now probe_lt_lib.py, which probe_lt_steps.py imports too.)"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from probe_lt_lib import Gemm, timed  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336),
          "lm_head": (128256, 4096)}
plan = [(m, name) for m in (2048, 8192) for name in ("qkv", "o", "gate_up", "down")] + \
       [(64, name) for name in ("qkv", "o", "gate_up", "down", "lm_head")]
for M, name in plan:
    N, K = SHAPES[name]
    copies = 1 if M >= 2048 else max(2, int(160e6 // (N * K * 2)) + 1)  # few rows: rotate past the L2
    ws = [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(copies)]
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    g = Gemm(M, N, K)
    ref = F.linear(x, ws[0])
    k = [0]
    def nxt():
        k[0] = (k[0] + 1) % copies
        return ws[k[0]]
    heat = 0.3 if M >= 2048 else 0.05
    reps = 20 if M >= 2048 else 200
    flops = 2 * M * N * K
    base = timed(lambda: F.linear(x, nxt(), out=None) if False else torch.mm(x, nxt().t(), out=y), heat, reps)
    rows = []
    for i in range(g.n):
        try:
            g.run(i, x, ws[0], y)
            torch.cuda.synchronize()
            err = (y.float() - ref.float()).abs().max().item()
            us = timed(lambda: g.run(i, x, nxt(), y), heat, reps)
            rows.append((us, i, err, g.heur[i].wavesCount, g.heur[i].workspaceSize))
        except Exception as exc:
            rows.append((float("inf"), i, float("nan"), 0.0, 0))
    base2 = timed(lambda: torch.mm(x, nxt().t(), out=y), heat, reps)
    rows.sort()
    unit = (lambda us: f"{flops / us / 1e6:6.0f} TF") if M >= 2048 else (lambda us: f"{N * K * 2 / us / 1e6:5.2f} TB/s")
    print(f"{name:8s} M={M:5d}: torch {base:8.1f} / {base2:8.1f} us ({unit(min(base, base2))}); {g.n} algos; best:", flush=True)
    for us, i, err, waves, wsz in rows[:4]:
        print(f"    algo#{i:2d} {us:8.1f} us ({unit(us)}) waves {waves:.2f} ws {wsz >> 10} KiB max|err| {err:.3g}", flush=True)
    del ws, x, y, ref
    torch.cuda.empty_cache()
