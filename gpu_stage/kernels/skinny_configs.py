"""Launch configurations of the skinny product (skinny_gemm.py), keyed by (rows bucket, N, K).

A configuration has two parts that answer different questions:
- the layout (BLOCK_K, CHUNK_K): the order in which an output's K products are summed. K is cut into
  chunks of CHUNK_K; each chunk is summed from zero in BLOCK_K steps, and the chunks' sums are added
  in order, by the program that made them or by the reduction kernel. It depends on the weight's
  shape (N, K) only, never on the rows: a row's output then has the same bits whatever the row count
  and whichever program summed the chunks (`split` or not);
- the launch (BLOCK_M, BLOCK_N, warps, stages, split): how the work is cut into programs. At a few
  rows the weight's N tiles alone do not fill the SMs, so each chunk gets its own program (`split`)
  and a second tiny kernel adds the chunks' float32 partials; at many rows the row tiles do.

`TUNED` overrides the heuristic for a (bucket, N, K) with what the lab's GPU run
(lab/skinny_gemm_gpu.py) found fastest; empty, every shape takes the heuristic.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpu_stage.kernels import interpreting

MIN_ROWS, MAX_ROWS = 2, 512  # one row is the gemv's (gemv.py); past 512 cuBLAS is at the ceiling
ROW_BUCKETS = (16, 32, 64, 128, 256, 512)
# Programs a launch should have for the weight to stream at full rate (about two per SM of an H100
# or an H200, 132 SMs): fewer, and the SMs left idle leave bandwidth unused. A constant, not the
# device's SM count, so that the layout (and so the bits of a row) is the same on every device.
TARGET_PROGRAMS = 256
LAYOUT_BLOCK_N = 128  # the N tile the chunk count is sized for
MIN_CHUNK_STEPS = 8  # a chunk is at least this many BLOCK_K steps: the loads' pipeline ramps per chunk


@dataclass(frozen=True)
class SkinnyConfig:
    block_m: int
    block_n: int
    block_k: int
    chunk_k: int  # a multiple of block_k
    split: bool  # one program per chunk, then the reduction kernel; else each program sums every chunk
    num_warps: int = 4
    num_stages: int = 3

    def launch(self) -> dict:
        """The kernel's compile options."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages}


# Rows bucket -> (BLOCK_M, BLOCK_N, warps, stages) on a GPU; tl.dot needs 16 rows at least.
GPU_LAUNCH: dict[int, tuple[int, int, int, int]] = {
    16: (16, 64, 4, 4),
    32: (32, 64, 4, 4),
    64: (64, 64, 4, 4),
    128: (64, 128, 4, 4),
    256: (128, 128, 8, 3),
    512: (128, 128, 8, 3),
}
GPU_BLOCK_K = 64
# Under the interpreter (CPU tests), which pays per program: few programs, taller row tiles past 32
# rows (a row's bits then cross a BLOCK_M change), and chunks sized for N tiles of 16 so that small
# shapes still have several (tests ask for narrower N tiles where they want several of them).
INTERPRETER_LAUNCH = (16, 64, 4, 1)
INTERPRETER_TALL_LAUNCH = (64, 64, 4, 1)
INTERPRETER_BLOCK_K = 16
INTERPRETER_LAYOUT_BLOCK_N = 16
INTERPRETER_TARGET_PROGRAMS = 8

TUNED: dict[tuple[int, int, int], SkinnyConfig] = {}  # (bucket, N, K) -> measured best, GPU only


def rows_bucket(rows: int) -> int:
    """The smallest bucket that holds `rows` (MIN_ROWS..MAX_ROWS)."""
    for bucket in ROW_BUCKETS:
        if rows <= bucket:
            return bucket
    raise ValueError(f"{rows} rows: the skinny product takes at most {MAX_ROWS}")


def chunk_k(n: int, k: int, block_k: int, ref_block_n: int, target_programs: int,
            min_steps: int = MIN_CHUNK_STEPS) -> int:
    """The layout's chunk width for a weight [n, k]: the fewest chunks (a power of two) that give
    `target_programs` with N tiles of `ref_block_n`, each chunk at least `min_steps` BLOCK_K steps."""
    k_steps = -(-k // block_k)
    n_tiles = -(-n // ref_block_n)
    chunks = 1
    while n_tiles * chunks < target_programs and k_steps // (2 * chunks) >= min_steps:
        chunks *= 2
    return -(-k_steps // chunks) * block_k


def heuristic_config(rows: int, n: int, k: int, silu_mul: bool = False) -> SkinnyConfig:
    """The configuration for `rows` x a weight [n, k] (silu_mul: gate_up, whose output is n / 2 wide)."""
    interp = interpreting()
    if interp:
        block_m, block_n, warps, stages = INTERPRETER_LAUNCH if rows <= 32 else INTERPRETER_TALL_LAUNCH
    else:
        block_m, block_n, warps, stages = GPU_LAUNCH[rows_bucket(rows)]
    block_k = INTERPRETER_BLOCK_K if interp else GPU_BLOCK_K
    target = INTERPRETER_TARGET_PROGRAMS if interp else TARGET_PROGRAMS
    width = chunk_k(n, k, block_k, INTERPRETER_LAYOUT_BLOCK_N if interp else LAYOUT_BLOCK_N, target,
                    2 if interp else MIN_CHUNK_STEPS)
    num_chunks = -(-k // width)
    out_cols = n // 2 if silu_mul else n
    programs = -(-rows // block_m) * -(-out_cols // block_n)
    # The partials are written and read back once: worth it while that traffic stays below the
    # weight's own bytes (2-byte weights; 4-byte partials, each moved twice).
    partial_bytes_ok = num_chunks * rows * 8 <= 2 * k
    split = num_chunks > 1 and programs < target and partial_bytes_ok
    return SkinnyConfig(block_m, block_n, block_k, width, split, warps, stages)


def config_for(rows: int, n: int, k: int, silu_mul: bool = False) -> SkinnyConfig:
    """TUNED's entry for the rows' bucket and the shape if there is one (on a GPU), else the heuristic."""
    tuned = None if interpreting() else TUNED.get((rows_bucket(rows), n, k))
    return tuned if tuned is not None else heuristic_config(rows, n, k, silu_mul)
