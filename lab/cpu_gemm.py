"""Which fp32 CPU matrix product is fastest at SmolLM2's shapes? `python -m lab.cpu_gemm [--threads 1]`

For each product (qkv, o, gate_up, down, lm_head) at 1, 4, 256 and 512 rows, times (median of
--reps, the variants interleaved call by call so a shared machine's load hits them alike):

    linear     F.linear(x, w): what TorchOps runs (MKL sgemm on torch's CPU build)
    mm_t       torch.mm(x, wt) with wt = w.t() stored contiguous ([in, out])
    tview      F.linear(x, w) with w the transposed view of a contiguous [in, out] copy: the model's
               call unchanged, the weight laid out as mm_t's (gpu_stage/model/cpu_weights.py)
    w_xt       torch.mm(w, x.t()).t(): the weight as it is stored, the rows as the narrow operand
    chunkN     F.linear over blocks of N output rows of w (each block small enough for the L2
               cache), concatenated
    onednn     torch.ops.mkldnn._linear_pointwise with the weight reordered once by
               torch.ops.mkldnn._reorder_linear_weight (oneDNN's blocked layout, vLLM-cpu's path)
               for this many rows; onednn_b8 reordered for 8 rows whatever the rows are
    mkl_packed torch.ops.mkl._mkl_linear with MKL's packed weight (torch.ops.mkl._mkl_reorder_linear_weight)

and checks each against F.linear (max relative error). Each call reads one of `--copies` copies of the
weight in turn (30: one per layer, as a real step reads them; the lm_head has one), so no weight is
cache-hot unless the model's would be. Prints us per call and GFLOP/s.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

HIDDEN, INTER, QKV, VOCAB = 576, 1536, 960, 49152
PRODUCTS = {"qkv": (QKV, HIDDEN), "o": (HIDDEN, HIDDEN), "gate_up": (2 * INTER, HIDDEN),
            "down": (HIDDEN, INTER), "lm_head": (VOCAB, HIDDEN)}


class Cycle:
    """Calls fn(x, weights[i]) with i cycling through the copies."""

    def __init__(self, fn, weights: list) -> None:
        self.fn, self.weights, self.i = fn, weights, 0

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.i = (self.i + 1) % len(self.weights)
        return self.fn(x, self.weights[self.i])


def variants(ws: list[torch.Tensor], rows: int) -> dict:
    """Every variant reads copies of its own: none finds its weight in a cache another one warmed."""
    def own() -> list[torch.Tensor]:
        return [w.clone() for w in ws]

    out = {"linear": Cycle(F.linear, own()),
           "mm_t": Cycle(torch.mm, [w.t().contiguous() for w in ws]),
           "tview": Cycle(F.linear, [w.t().contiguous().t() for w in ws]),
           "w_xt": Cycle(lambda x, w: torch.mm(w, x.t()).t(), own())}
    for rows_per_block in (512, 2048):
        out[f"chunk{rows_per_block}"] = Cycle(
            lambda x, blocks: torch.cat([F.linear(x, b) for b in blocks], dim=1),
            [w.split(rows_per_block) for w in own()])
    try:
        packed = [torch.ops.mkldnn._reorder_linear_weight(w.clone(), rows) for w in ws]
        out["onednn"] = Cycle(lambda x, p: torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], ""), packed)
        packed8 = [torch.ops.mkldnn._reorder_linear_weight(w.clone(), 8) for w in ws]
        out["onednn_b8"] = Cycle(lambda x, p: torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], ""), packed8)
    except (RuntimeError, AttributeError) as exc:
        print("onednn unavailable:", exc)
    try:
        mkl = [(torch.ops.mkl._mkl_reorder_linear_weight(w, rows), w) for w in own()]
        out["mkl_packed"] = Cycle(lambda x, p: torch.ops.mkl._mkl_linear(x, p[0], p[1], None, rows), mkl)
    except (RuntimeError, AttributeError) as exc:
        print("mkl packed unavailable:", exc)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--rows", default="1,4,256,512")
    p.add_argument("--copies", type=int, default=30)
    p.add_argument("--products", default=",".join(PRODUCTS))
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    print(f"threads {torch.get_num_threads()}")
    with torch.inference_mode():
        for name in a.products.split(","):
            n, k = PRODUCTS[name]
            ws = [torch.randn(n, k) / k ** 0.5 for _ in range(1 if name == "lm_head" else a.copies)]
            for rows in map(int, a.rows.split(",")):
                x = torch.randn(rows, k)
                fns = variants(ws, rows)
                errs = {}
                for v, fn in fns.items():
                    fn.i = len(ws) - 1  # the next call uses copy 0
                    ref = F.linear(x, ws[0])
                    errs[v] = float((fn(x) - ref).abs().max() / ref.abs().max())
                times: dict[str, list[float]] = {v: [] for v in fns}
                for _ in range(a.reps):
                    for v, fn in fns.items():
                        t0 = time.perf_counter()
                        fn(x)
                        times[v].append(time.perf_counter() - t0)
                cells = []
                for v in fns:
                    us = statistics.median(times[v]) * 1e6
                    cells.append(f"{v} {us:8.0f} us {2 * rows * n * k / us / 1e3:6.1f} GF/s err {errs[v]:.0e}")
                print(f"{name:8s} rows {rows:4d}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
