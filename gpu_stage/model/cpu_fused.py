"""A CPU decode layer's elementwise work in one C++ call each instead of a dozen torch operators:
residual add + RMSNorm, SiLU-and-multiply, and RoPE on q and k with the new K/V stored in the pool.

At decode shapes (1-8 rows of 576 floats) the work of these ops is a few microseconds, and what a
step pays is dispatch: a SmolLM2 layer ran ~60 torch operators from Python around its 4 products,
~1,800 a step (lab/cpu_decode_floor.py counts them), each a few microseconds on a 2-core VM. The
kernels here take the tensors' data pointers through ctypes (which releases the GIL) and run on the
calling thread: one row is a few hundred floats, too little to share with a second thread.

Numerics follow torch_ops.TorchOps (HF's order): compiled with -ffp-contract=off so no product and
sum are fused where torch rounds each; SiLU uses ATen's vectorised exp (Sleef's, the one torch's
kernel calls), so SiLU-and-multiply and RoPE equal torch's bit for bit. RMSNorm's mean of squares
is summed in another order than ATen's reduction (relative 1e-7 on the norm's output).

Built as the decode attention is (attention/cpu_decode_kernel.py: g++, ATen's headers only, cached
under $TTFT_CACHE_DIR); `enable()` compiles and switches it on, `library()` is what CpuOps and the
torch backend ask (None: the torch operators serve, as they do where the build fails).
"""
from __future__ import annotations

import ctypes
import logging

import torch

from gpu_stage.attention.cpu_decode_kernel import FLAGS, build_name, build_shared
from gpu_stage.cpu_caps import detect

log = logging.getLogger("ttft.gpu")

# No contraction of a product and a sum into an FMA: torch's elementwise kernels round each.
FUSED_FLAGS = (*FLAGS, "-ffp-contract=off")
SOURCE = r"""
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
using Vec = at::vec::Vectorized<float>;
// Rows per work item: a decode step's few rows run on the calling thread (parallel_for runs a range
// below its grain inline), a prefill chunk's are shared by torch's threads.
static inline int64_t grain(int64_t floats_per_row) { return std::max<int64_t>(1, 32768 / floats_per_row); }

// h = res + x (x may be null: h = res), out = w * (h * (1 / sqrt(mean(h * h) + eps))), row by row.
extern "C" void add_rms_norm(const float* x, const float* res, const float* w, float eps, int64_t rows,
                             int64_t d, float* h_out, float* out) {
  at::parallel_for(0, rows, grain(d), [&](int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x ? x + r * d : nullptr; const float* rr = res + r * d;
    float* hr = h_out + r * d; float* o = out + r * d;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < d; ++i) {
      const float h = xr ? rr[i] + xr[i] : rr[i];
      hr[i] = h; acc[i & 7] += h * h;
    }
    const float ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    const float inv = 1.f / std::sqrt(ss / (float)d + eps);
    for (int64_t i = 0; i < d; ++i) o[i] = w[i] * (hr[i] * inv);
  }
  });
}

// out[r, i] = silu(gu[r, i]) * gu[r, inter + i]; silu(x) = x / (1 + exp(-x)) as ATen's kernel.
extern "C" void silu_mul(const float* gu, int64_t rows, int64_t inter, float* out) {
  const Vec one(1.f);
  at::parallel_for(0, rows, grain(inter), [&](int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* g = gu + r * 2 * inter; const float* u = g + inter; float* o = out + r * inter;
    int64_t i = 0;
    for (; i + Vec::size() <= inter; i += Vec::size()) {
      const Vec x = Vec::loadu(g + i);
      const Vec s = x / (one + x.neg().exp());
      (s * Vec::loadu(u + i)).store(o + i);
    }
    for (; i < inter; ++i) o[i] = (g[i] / (1.f + std::exp(-g[i]))) * u[i];
  }
  });
}

// q [T, H, D] and k, v [T, Hkv, D], rows `stride` floats apart (views of one qkv product): q and k
// rotated in place (x * cos + rotate_half(x) * sin), then k and v written to the pool's rows
// k_rows[t] and k_rows[t] + v_delta (row width Hkv * D).
static inline void rotate(float* x, const float* c, const float* s, int64_t half) {
  for (int64_t j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    x[j] = a * c[j] + (-b) * s[j];
    x[j + half] = b * c[j + half] + a * s[j + half];
  }
}
extern "C" void rope_store(float* q, float* k, const float* v, int64_t stride, int64_t T, int64_t H, int64_t KVH,
                           int64_t D, const float* cosp, const float* sinp, float* pool, const int64_t* k_rows,
                           int64_t v_delta) {
  const int64_t half = D / 2, width = KVH * D;
  at::parallel_for(0, T, grain((H + 2 * KVH) * D), [&](int64_t begin, int64_t end) {
  for (int64_t t = begin; t < end; ++t) {
    const float* c = cosp + t * D; const float* s = sinp + t * D;
    for (int64_t h = 0; h < H; ++h) rotate(q + t * stride + h * D, c, s, half);
    float* kt = k + t * stride;
    for (int64_t h = 0; h < KVH; ++h) rotate(kt + h * D, c, s, half);
    float* krow = pool + k_rows[t] * width; float* vrow = pool + (k_rows[t] + v_delta) * width;
    const float* vt = v + t * stride;
    for (int64_t i = 0; i < width; ++i) { krow[i] = kt[i]; vrow[i] = vt[i]; }
  }
  });
}
"""

_P, _I, _F = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float
_SIGNATURES = {
    "add_rms_norm": [_P, _P, _P, _F, _I, _I, _P, _P],
    "silu_mul": [_P, _I, _I, _P],
    "rope_store": [_P, _P, _P, _I, _I, _I, _I, _I, _P, _P, _P, _P, _I],
}
_state: dict[str, ctypes.CDLL | None] = {"lib": None}


def library() -> ctypes.CDLL | None:
    """The compiled functions while enabled, else None (the torch operators)."""
    return _state["lib"]


def enable() -> bool:
    """Compile (or load the cached build of) the fused ops and use them; False where they cannot be."""
    if _state["lib"] is not None:
        return True
    try:
        name = build_name(detect().flags, SOURCE, "ttft_cpu_fused", FUSED_FLAGS)
        lib = ctypes.CDLL(str(build_shared(name, SOURCE, FUSED_FLAGS)))
        for fn_name, args in _SIGNATURES.items():
            fn = getattr(lib, fn_name)
            fn.argtypes, fn.restype = args, None
    except Exception as exc:  # no compiler, a failed build, an unloadable object: the torch operators serve
        text = str(exc).strip()
        log.warning("CPU fused ops: not built (%s: %s); the layers' elementwise work runs as torch operators",
                    type(exc).__name__, text.splitlines()[-1][:200] if text else "")
        return False
    _state["lib"] = lib
    log.info("CPU fused ops: built; norms, SiLU-and-multiply and RoPE with the KV store run in one call each")
    return True


def disable() -> None:
    _state["lib"] = None


def _plain(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def add_rms_norm(lib: ctypes.CDLL, x: torch.Tensor | None, residual: torch.Tensor, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(rms_norm(residual + x), residual + x) (x None: of residual alone), or None where the
    tensors are not the kernel's (float32, contiguous, on the CPU)."""
    if not (_plain(residual, weight) and (x is None or _plain(x))):
        return None
    rows, d = residual.shape
    h, out = torch.empty_like(residual), torch.empty_like(residual)
    lib.add_rms_norm(None if x is None else x.data_ptr(), residual.data_ptr(), weight.data_ptr(), eps, rows, d,
                     h.data_ptr(), out.data_ptr())
    return out, h


def silu_mul(lib: ctypes.CDLL, gate_up: torch.Tensor) -> torch.Tensor | None:
    """silu(gate) * up of gate_up [N, 2 * inter], or None where it is not the kernel's."""
    if not _plain(gate_up):
        return None
    rows, width = gate_up.shape
    out = torch.empty(rows, width // 2)
    lib.silu_mul(gate_up.data_ptr(), rows, width // 2, out.data_ptr())
    return out


def rope_store(lib: ctypes.CDLL, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor, rows: torch.Tensor, k_rows: torch.Tensor, v_delta: int) -> bool:
    """q [T, H, D], k / v [T, Hkv, D] (views of one [T, q + 2 kv] product, rows one stride apart):
    q and k rotated in place, k and v stored at pool rows k_rows (and + v_delta) of `rows`
    [num_rows, Hkv * D]. False (nothing done) where the tensors are not the kernel's."""
    one = q.shape[0] == 1  # a lone token's row stride is whatever its view says: none is read
    stride = 0 if one else q.stride(0)
    if not (q.dtype == k.dtype == v.dtype == rows.dtype == torch.float32 and _plain(cos, sin)
            and (one or k.stride(0) == v.stride(0) == stride) and q.stride(1) == k.stride(1) == v.stride(1) == q.shape[2]
            and q.stride(2) == 1 and rows.stride(1) == 1 and rows.shape[1] == k.shape[1] * k.shape[2]
            and k_rows.dtype == torch.int64 and k_rows.is_contiguous() and cos.shape == (q.shape[0], q.shape[2])):
        return False
    num_tokens, num_heads, head_dim = q.shape
    lib.rope_store(q.data_ptr(), k.data_ptr(), v.data_ptr(), stride, num_tokens, num_heads, k.shape[1], head_dim,
                   cos.data_ptr(), sin.data_ptr(), rows.data_ptr(), k_rows.data_ptr(), v_delta)
    return True
