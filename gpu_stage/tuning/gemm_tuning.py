"""Start-up choice of a cuBLASLt algorithm for each matrix product of the decode graphs.

F.linear runs the first algorithm of cuBLASLt's heuristic. For each weight shape (q/k/v, o,
gate_up, down, lm_head) at each row count a decode graph replays (its batch bucket), this times
the heuristic's split-free algorithms (cublaslt.py) against F.linear, on the model's own weights
cycled past the L2 (a decode step reads each weight once), in CUDA graphs, interleaved over a few
rounds. An algorithm is kept where it is more than LT_MARGIN faster; the graphs then capture it.
Products at other row counts, with a bias, or where F.linear won run F.linear.

Why decode only: on an H200 at 64 rows the choices take the lm_head from 283 to 264 us and the
64-stream ITL down ~1%; prefill shapes gain in isolation too, but in the server neither the long
prefills nor the mixed steps (256-1,024 rows) gained from choices timed at start-up (prompts
between the timed lengths got ~1 ms slower): they stay on F.linear.
"""
from __future__ import annotations

import bisect
import logging
import os
import statistics
import time
from typing import Callable, Iterable, Protocol, Sequence

import torch
import torch.nn.functional as F

from gpu_stage.graph_capture import capturing
from gpu_stage.tuning import cublaslt
from gpu_stage.tuning.cublaslt import LtAlgo

log = logging.getLogger("ttft.gemm")

LT_MARGIN = 0.02
NUM_LAYERS_CYCLED = 8
ROUNDS, REPEATS = 3, 4


def enabled() -> bool:
    """TTFT_CUBLASLT=0 keeps every product on F.linear."""
    return os.environ.get("TTFT_CUBLASLT", "1") != "0" and cublaslt.available()


class _Product(Protocol):  # cublaslt.LtProduct
    def supports(self, algo: LtAlgo) -> bool: ...

    def run(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, algo: LtAlgo) -> None: ...


class _Library(Protocol):  # cublaslt.Lt
    def product(self, rows: int, out_features: int, in_features: int, dtype: torch.dtype) -> _Product: ...


class LtPlan:
    """The chosen algorithm per (weight shape, timed row count), and the products built from it."""

    def __init__(self, lt: _Library, dtype: torch.dtype) -> None:
        self.lt, self.dtype = lt, dtype
        self._timed: dict[tuple[int, int], tuple[list[int], list[LtAlgo | None]]] = {}
        self._products: dict[tuple[int, int, int], tuple[_Product, LtAlgo] | None] = {}

    def choose(self, out_features: int, in_features: int, rows: int, algo: LtAlgo | None) -> None:
        counts, algos = self._timed.setdefault((out_features, in_features), ([], []))
        i = bisect.bisect_left(counts, rows)
        assert i == len(counts) or counts[i] != rows, "one choice per row count"
        counts.insert(i, rows)
        algos.insert(i, algo)
        self._products.clear()

    def choice_for(self, rows: int, out_features: int, in_features: int) -> LtAlgo | None:
        """The algorithm timed best at exactly this row count (None: F.linear)."""
        timed = self._timed.get((out_features, in_features))
        if timed is None:
            return None
        i = bisect.bisect_left(timed[0], rows)
        return timed[1][i] if i < len(timed[0]) and timed[0][i] == rows else None

    def resolve(self, rows: int, out_features: int, in_features: int) -> tuple[_Product, LtAlgo] | None:
        key = (rows, out_features, in_features)
        try:
            return self._products[key]
        except KeyError:
            pass
        entry = None
        algo = self.choice_for(rows, out_features, in_features)
        if algo is not None:
            product = self.lt.product(rows, out_features, in_features, self.dtype)
            if product.supports(algo):
                entry = (product, algo)
        self._products[key] = entry
        return entry

    def linear(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
        """x @ weight^T with the chosen algorithm, or None where F.linear should run it. The cached
        lookup comes first: an eager step's products mostly have no choice, and pay only for it."""
        entry = self.resolve(x.shape[0], weight.shape[0], weight.shape[1])
        if entry is None or x.dtype != self.dtype or not cublaslt.operands_fit(x, weight):
            return None
        out = x.new_empty((x.shape[0], weight.shape[0]))
        entry[0].run(x, weight, out, entry[1])
        return out

    def num_chosen(self) -> int:
        return sum(a is not None for _, algos in self._timed.values() for a in algos)


def tuned_row_counts(decode_rows: Iterable[int], max_tokens: int) -> list[int]:
    """Row counts to time: the decode graphs' buckets within the step budget; one row is the
    gemv's (gemv_tuning.py)."""
    return sorted({r for r in decode_rows if 1 < r <= max_tokens})


def _median_us(graphs: Sequence[torch.cuda.CUDAGraph], calls: int) -> list[float]:
    """Device microseconds per call of each graph, interleaved over ROUNDS (the board's clock
    drifts as it heats: every candidate sees each phase)."""
    samples: list[list[float]] = [[] for _ in graphs]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for graph in graphs:
        graph.replay()
    for _ in range(ROUNDS):
        for i, graph in enumerate(graphs):
            start.record()
            for _ in range(REPEATS):
                graph.replay()
            end.record()
            end.synchronize()
            samples[i].append(start.elapsed_time(end) * 1e3 / (REPEATS * calls))
    return [statistics.median(s) for s in samples]


def _capture(fn: Callable[[int], None], calls: int) -> torch.cuda.CUDAGraph:
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with capturing(graph):
        for i in range(calls):
            fn(i)
    return graph


def _agrees(product: _Product, algo: LtAlgo, x: torch.Tensor, weight: torch.Tensor, ref: torch.Tensor) -> bool:
    """Within a rounding of F.linear, and the same bits twice (nothing order-dependent)."""
    first, second = torch.empty_like(ref), torch.empty_like(ref)
    product.run(x, weight, first, algo)
    product.run(x, weight, second, algo)
    scale = ref.abs().max().item() or 1.0
    return torch.equal(first, second) and (first.float() - ref.float()).abs().max().item() <= 1e-2 * scale


@torch.inference_mode()
def tune_products(model, rows: Sequence[int], head_rows: Sequence[int], lt: cublaslt.Lt | None = None
                  ) -> tuple[LtPlan, list[dict]]:
    """Time every product of `model` (on CUDA) at `rows` (the lm_head at `head_rows`) -> the plan
    and one report row per (product, row count)."""
    head = model.head_weight
    lt = lt or cublaslt.Lt(head.device)
    plan = LtPlan(lt, head.dtype)
    layers = list(model.layers)[:NUM_LAYERS_CYCLED]
    products = [(name, [getattr(layer, name) for layer in layers]) for name in
                ("qkv_weight", "o_weight", "gate_up_weight", "down_weight")
                if getattr(layers[0], name.replace("weight", "bias"), None) is None]
    report, t0 = [], time.perf_counter()
    gen = torch.Generator(device=head.device).manual_seed(0)
    for name, weights, counts in [(n, w, rows) for n, w in products] + [("lm_head", [head], head_rows)]:
        n, k = weights[0].shape
        for count in counts:
            x = torch.randn(count, k, device=head.device, dtype=head.dtype, generator=gen)
            out = torch.empty(count, n, device=head.device, dtype=head.dtype)
            ref = F.linear(x, weights[0])
            product = lt.product(count, n, k, head.dtype)
            algos = [a for a in product.algorithms() if _agrees(product, a, x, weights[0], ref)]
            calls = max(len(weights), 2)
            graphs = [_capture(lambda i: torch.mm(x, weights[i % len(weights)].t(), out=out), calls)]
            for algo in algos:
                graphs.append(_capture(lambda i, a=algo: product.run(x, weights[i % len(weights)], out, a), calls))
            times = _median_us(graphs, calls)
            best = min(range(len(algos)), key=lambda j: times[j + 1], default=None)
            chosen = algos[best] if best is not None and times[best + 1] < times[0] * (1 - LT_MARGIN) else None
            plan.choose(n, k, count, chosen)
            report.append({"product": name, "rows": count, "f_linear_us": round(times[0], 2),
                           "lt_us": [round(t, 2) for t in times[1:]],
                           "chosen": None if chosen is None else chosen.rank})
            log.debug("%s", report[-1])
            del graphs
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    log.info("timed cuBLASLt's algorithms for %d products in %.1f s: %d use another than F.linear's",
             len(report), time.perf_counter() - t0, plan.num_chosen())
    return plan, report
