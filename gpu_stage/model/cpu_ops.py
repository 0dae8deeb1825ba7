"""CpuOps: TorchOps with its matrix products laid out for the CPU's BLAS at serving shapes (the
model runner uses it on CPU; TorchOps stays the reference).

Measured on the SmolLM2 shape, fp32, one thread, weights cold as in a step (`python -m lab.cpu_gemm`,
notes/cpu_serving.md): F.linear(x, w) with w stored [out, in] is MKL's "NT" product, which at 4-64
rows copies the weight into its own panels first and reads it about twice:
- a layer's products: the same values stored [in, out] (the parameter then the transposed view of
  that buffer, so F.linear's call is unchanged) run as "NN" and read each weight once: gate_up at
  40 rows ~3.0 ms instead of ~4.0, qkv 0.46 instead of 0.63; at 1 row the same or faster
  (`transpose_layer_weights`, no memory added);
- the lm_head (49,152 x 576, 113 MB): at 4 rows 51 ms with F.linear, 27 ms from a copy in oneDNN's
  blocked layout (torch.ops.mkldnn, the path vLLM's CPU build takes), 34 against 98 at 8 rows; on
  the AVX2 EPYC (2 threads, shared) 15.5 against 43 ms at 2 rows. A decode step of 4 sequences reads
  the head once per row with F.linear: about a third of the step. So `pack_head` keeps that copy
  (113 MB here) and `linear` uses it from PACKED_HEAD_MIN_ROWS rows on. At one row oneDNN's kernel is
  no faster than F.linear, but F.linear over the head stored [out, in] (a tied head is the
  embedding) is MKL's slow GEMV form: 15.7-18.2 ms against 9.2-10.2 from the same values stored
  [in, out] (lab/cpu_gemm.py, `linear` against `tview`), so `pack_head` keeps that layout too (another
  113 MB) for one-row products.
- a layer's products at 2-64 rows (decode steps of several sequences): from a oneDNN-packed copy
  too, on an AVX2 EPYC (2 threads, weights cold) ~2x faster than F.linear's NN product at 2-8
  rows (gate_up at 4 rows ~0.4 ms against ~1.0, down 0.25 against 0.38), no slower up to 64; at
  one row F.linear's GEMV is as fast or faster (on one thread clearly: gate_up 0.33 against
  0.50 ms), and past 64 rows (prefill chunks) the two are even, so F.linear keeps those
  (`pack_layers`, PACKED_LAYER_ROWS; the copies add the layer weights' size in memory).
Results differ from F.linear's only by summation order (relative 1e-6).

oneDNN builds (and caches) a primitive per product shape, ~0.5 MB each: a layer product at every
row count from 2 to 64 grew a server's memory by ~140 MB as new batch sizes came, after start-up.
So a layer's packed product runs at a few row buckets (LAYER_ROW_BUCKETS: every count to 8, a CPU
server's usual decode batches; past 8, x padded with zero rows to at most 1.5x the rows, which can
cost those products about as much in time), and `prepare_cpu_model` builds those primitives (~30 MB) before serving.

Over an 8-bit KV pool (kv/invariance.py) a row's products must not depend on the rows beside it:
MKL's F.linear sums a row in another order below 4 rows and where two threads split an odd row
count, while oneDNN's product from the packed copy gives every row the same bits at any row count
and thread count (tests/gpu_stage/model/test_cpu_ops.py checks it). So `row_invariant` packs every
layer weight too and sends every product, the head's included, through oneDNN: at one row ~1.2x
F.linear's time (the GEMV reads a weight once, oneDNN's kernel a little slower), at 8 rows and on
prefill about the same; the packed copies double the layer weights' memory.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from gpu_stage.model import cpu_fused
from gpu_stage.model.torch_ops import TorchOps

log = logging.getLogger("ttft.gpu")

PACKED_HEAD_MIN_ROWS = 2  # one row: the head's [in, out] copy (F.linear's GEMV), 2+: oneDNN's
PACKED_LAYER_ROWS = (2, 64)  # the row counts a layer's product runs from its packed copy
LAYER_ROW_BUCKETS = (2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)  # the row counts it runs at (padded up)
ANY_ROWS = (1, 2**62)
PACK_ROWS_HINT = 8  # the row count oneDNN chooses the head's blocked layout for (measured: 1-40 rows served well)


def onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class CpuOps(TorchOps):
    """One instance per model (it holds the model's packed weights). `row_invariant`: every packed
    weight's products through oneDNN at any row count (see the module docstring)."""

    def __init__(self, row_invariant: bool = False) -> None:
        self.row_invariant = row_invariant
        self.fused = cpu_fused.library()  # the C++ elementwise ops (cpu_fused.py) where built, else None
        self.head_weight: torch.Tensor | None = None  # the parameter the packed head stands for
        self.head_one_row: torch.Tensor | None = None  # its values stored [in, out] (one-row products)
        self.num_packed_layers = 0  # layer weights packed (pack_layers, or every one when row_invariant)
        # id(weight) -> (weight, packed copy, fewest rows, most rows that use the copy)
        self.packed: dict[int, tuple[torch.Tensor, torch.Tensor, int, int]] = {}

    def pack(self, weight: torch.Tensor, rows: tuple[int, int] = ANY_ROWS) -> bool:
        """Keep `weight` in oneDNN's layout too, its products at `rows` (first, last) from the copy
        (at any row count when row_invariant); False where oneDNN is missing or it is not float32."""
        if not onednn_available() or weight.dtype != torch.float32:
            return False
        with torch.inference_mode():
            copy = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_ROWS_HINT)
        self.packed[id(weight)] = (weight, copy, *(ANY_ROWS if self.row_invariant else rows))
        return True

    def pack_head(self, weight: torch.Tensor) -> bool:
        """pack(weight), the lm_head's: from PACKED_HEAD_MIN_ROWS rows on its products use the copy,
        below from a copy stored [in, out] (not where every product goes through oneDNN)."""
        self.head_weight = weight if self.pack(weight, (PACKED_HEAD_MIN_ROWS, ANY_ROWS[1])) else None
        if self.head_weight is not None and not self.row_invariant:
            self.head_one_row = weight.detach().t().contiguous().t()
        return self.head_weight is not None

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        entry = self.packed.get(id(weight))
        if entry is not None and entry[0] is weight and entry[2] <= x.shape[0] <= entry[3]:
            if entry[2:] != PACKED_LAYER_ROWS:
                return torch.ops.mkldnn._linear_pointwise(x, entry[1], bias, "none", [], "")
            rows = x.shape[0]
            bucket = row_bucket(rows)
            padded = x if bucket == rows else F.pad(x, (0, 0, 0, bucket - rows))
            return torch.ops.mkldnn._linear_pointwise(padded, entry[1], bias, "none", [], "")[:rows]
        if weight is self.head_weight and self.head_one_row is not None:
            return F.linear(x, self.head_one_row, bias)
        return F.linear(x, weight, bias)

    def build_layer_primitives(self) -> int:
        """Run each packed layer shape once at every row bucket, so that oneDNN's primitives exist
        before serving (memory then does not grow with the batch sizes requests bring). -> how many."""
        shapes = {(tuple(entry[0].shape), entry[0].dtype): entry
                  for entry in self.packed.values() if entry[2:] == PACKED_LAYER_ROWS}
        with torch.inference_mode():
            for (shape, dtype), (weight, _, _, _) in shapes.items():
                for rows in LAYER_ROW_BUCKETS:
                    self.linear(torch.zeros(rows, shape[1], dtype=dtype), weight)
        return len(shapes) * len(LAYER_ROW_BUCKETS)

    def gate_up_silu(self, x: torch.Tensor, gate_up_weight: torch.Tensor) -> torch.Tensor:
        return self.silu_and_mul(self.linear(x, gate_up_weight))

    # The elementwise ops: one C++ call each where cpu_fused is built and the tensors are its kind.
    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        fused = None if self.fused is None else cpu_fused.add_rms_norm(self.fused, None, x, weight, eps)
        return TorchOps.rms_norm(x, weight, eps) if fused is None else fused[0]

    def add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        fused = None if self.fused is None else cpu_fused.add_rms_norm(self.fused, x, residual, weight, eps)
        return TorchOps.add_rms_norm(x, residual, weight, eps) if fused is None else fused

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        fused = None if self.fused is None else cpu_fused.silu_mul(self.fused, x)
        return TorchOps.silu_and_mul(x) if fused is None else fused

    @property
    def fuses_rope_store(self) -> bool:
        return self.fused is not None

    def rope_store_rows(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, rows: torch.Tensor, k_rows: torch.Tensor, v_delta: int) -> bool:
        return self.fused is not None and cpu_fused.rope_store(self.fused, q, k, v, cos, sin, rows, k_rows, v_delta)


LAYER_WEIGHTS = ("qkv_weight", "o_weight", "gate_up_weight", "down_weight")


def row_bucket(rows: int) -> int:
    """The smallest of LAYER_ROW_BUCKETS holding `rows` (2-64)."""
    return next(b for b in LAYER_ROW_BUCKETS if b >= rows)


def transpose_layer_weights(model) -> int:
    """Store every decoder layer's product weights [in, out] in place of [out, in], each parameter
    becoming the transposed view of its new buffer (values, shape and names unchanged). -> the
    number of weights moved."""
    moved = 0
    with torch.no_grad():
        for layer in model.layers:
            for name in LAYER_WEIGHTS:
                param = getattr(layer, name)
                param.data = param.data.t().contiguous().t()
                moved += 1
    return moved


def prepare_cpu_model(model, row_invariant: bool = False, pack_layers: bool = True) -> CpuOps:
    """The model's layers laid out [in, out] and its head packed; its ops become a CpuOps.
    `pack_layers`: the layer weights packed as well, used at PACKED_LAYER_ROWS. `row_invariant`
    (an 8-bit KV pool): every layer weight packed, every product through oneDNN at any row count.
    Call after load_weights (the loaders copy into the parameters, whatever their strides)."""
    packed = onednn_available() and model.head_weight.dtype == torch.float32
    ops = CpuOps(row_invariant and packed)
    transpose_layer_weights(model)
    ops.pack_head(model.head_weight)
    if packed and (ops.row_invariant or pack_layers):
        for layer in model.layers:
            for name in LAYER_WEIGHTS:
                ops.num_packed_layers += ops.pack(getattr(layer, name), PACKED_LAYER_ROWS)
    if ops.num_packed_layers and not ops.row_invariant:
        ops.build_layer_primitives()
    if row_invariant and not ops.row_invariant:
        log.warning("CPU products: oneDNN is missing or the model is not float32: an 8-bit KV pool's "
                    "outputs may depend on batching")
    for module in (model, *model.layers):
        module.ops = ops
    layers = ("packed for oneDNN at every row count" if ops.row_invariant else
              f"packed for oneDNN at {PACKED_LAYER_ROWS[0]}-{PACKED_LAYER_ROWS[1]} rows" if ops.num_packed_layers else "")
    log.info("CPU products: layer weights stored [in, out]%s; lm_head %s", f", {layers}" if layers else "",
             "packed for oneDNN" if packed else "as is")
    return ops
