"""A decode attention for the CPU that reads the paged KV pool in place: a small C++ kernel compiled at
start-up (g++, ATen's headers only), on by default (`--cpu-decode-kernel`; `--no-cpu-decode-kernel`
keeps the torch path). model/cpu_fused.py builds the same way (`build_shared`).

The torch path (torch_backend._decode) gathers every decode sequence's whole context out of the pool
per layer (index_select into a fresh [Bd * Ld, kv_heads * head_dim] copy) and then runs SDPA's flash
kernel over that copy: the context's K/V cross memory three times (read, written, read again). This
kernel reads each K and V row once, where it lies, by the same per-position row indices the plan
already holds (decode_k_rows; a value's row is its key's + v_delta): one work item per sequence, all
query heads at once for each row read (a row holds every kv head, so its cache lines are fetched
once), the scores' exponentials eight at a time. On a 2-core AVX2 EPYC, 30 layers of 4 sequences at
1,200 tokens: ~29 ms against ~55 ms for the gather and SDPA on one thread; at 288 tokens 6.0 against
11.1 ms. Output equals SDPA's within float32 rounding (relative 1e-6).

The source includes ATen's parallel_for and vectorised exp but not torch/extension.h and pybind11,
whose parsing was most of a build's time: it compiles in ~2-3 s, where an extension built with
torch.utils.cpp_extension took ~30-45 s on two cores (the time a first start, and every clean test
run, paid). It is linked against torch's own libraries (its threads are torch's pool) and called
through ctypes on the tensors' data pointers; ctypes releases the GIL for the call. The build is
cached under $TTFT_CACHE_DIR (default ~/.cache/ttft) by a name that carries the source's, the flags',
torch's version and the CPU flags' hash, so a build made for another processor or torch is never
loaded. Without a compiler, or where the build fails, the torch path stays (a warning says so).
`enable()` compiles and switches it on for the process; `kernel()` is what the backend asks.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import subprocess
import tempfile
from pathlib import Path

import torch

from gpu_stage.cpu_caps import detect

log = logging.getLogger("ttft.gpu")

COMPILER = os.environ.get("CXX", "g++")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17")
SOURCE = r"""
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <cmath>
#include <cstdint>
#include <vector>
#include <algorithm>
using Vec = at::vec::Vectorized<float>;
typedef float v8 __attribute__((vector_size(32)));
extern "C" void paged_decode(const float* qp, const float* rp, int64_t rs, const int64_t* kr, const int64_t* lp,
                             int64_t B, int64_t H, int64_t D, int64_t KVH, int64_t max_len, int64_t v_delta,
                             float sc, float* op) {
  const int64_t G = H / KVH;
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> s(H * max_len), acc(H * D), denom(H);
    for (int64_t b = begin; b < end; ++b) {
      const int64_t len = lp[b];
      const float* qb = qp + b * H * D;
      const int64_t* idx = kr + b * max_len;
      for (int64_t t = 0; t < len; ++t) {
        const float* krow = rp + idx[t] * rs;
        for (int64_t hh = 0; hh < H; ++hh) {
          const float* k = krow + (hh / G) * D; const float* qg = qb + hh * D;
          v8 a = {0, 0, 0, 0, 0, 0, 0, 0};
          for (int64_t d = 0; d < D; d += 8) {
            v8 kv, qv;
            __builtin_memcpy(&kv, k + d, 32); __builtin_memcpy(&qv, qg + d, 32);
            a += kv * qv;
          }
          s[hh * max_len + t] = (((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]))) * sc;
        }
      }
      for (int64_t hh = 0; hh < H; ++hh) {
        float* sg = s.data() + hh * max_len; float m = -INFINITY;
        for (int64_t t = 0; t < len; ++t) m = std::max(m, sg[t]);
        float z = 0.f; int64_t t = 0; const Vec mv(m); Vec zv(0.f);
        for (; t + Vec::size() <= len; t += Vec::size()) { Vec x = (Vec::loadu(sg + t) - mv).exp_u20(); x.store(sg + t); zv = zv + x; }
        float zs[Vec::size()]; zv.store(zs);
        for (int i = 0; i < Vec::size(); ++i) z += zs[i];
        for (; t < len; ++t) { sg[t] = std::exp(sg[t] - m); z += sg[t]; }
        denom[hh] = z;
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t t = 0; t < len; ++t) {
        const float* vrow = rp + (idx[t] + v_delta) * rs;
        for (int64_t hh = 0; hh < H; ++hh) {
          const float* v = vrow + (hh / G) * D; const float w = s[hh * max_len + t]; float* a = acc.data() + hh * D;
          #pragma omp simd
          for (int64_t d = 0; d < D; ++d) a[d] += w * v[d];
        }
      }
      for (int64_t hh = 0; hh < H; ++hh) {
        float* o = op + (b * H + hh) * D; const float inv = 1.f / denom[hh];
        for (int64_t d = 0; d < D; ++d) o[d] = acc[hh * D + d] * inv;
      }
    }
  });
}
"""

_state: dict[str, object] = {"kernel": None}
_ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_float,
         ctypes.c_void_p]


def kernel():
    """The compiled function while enabled, else None (the torch path)."""
    return _state["kernel"]


def build_name(flags: frozenset[str], source: str | None = None, prefix: str = "ttft_cpu_decode",
               compile_flags: tuple[str, ...] = FLAGS) -> str:
    """The cached object's name for `source` (default: this module's SOURCE) compiled with
    `compile_flags` on a CPU of `flags`."""
    key = (SOURCE if source is None else source) + " ".join(compile_flags) + ",".join(sorted(flags)) + torch.__version__
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]  # ATen's ABI is the version's
    return f"{prefix}_{digest}"


def cache_dir() -> Path:
    return Path(os.environ.get("TTFT_CACHE_DIR") or Path.home() / ".cache" / "ttft")


def build_shared(name: str, source: str, flags: tuple[str, ...] = FLAGS) -> Path:
    """The shared object of `name` compiled from `source`: the cached one, or compiled now (atomically:
    a concurrent start compiles its own copy and the last rename wins, never a half-written file).
    RuntimeError (the compiler's message) or OSError where it cannot be built."""
    folder = cache_dir()
    target = folder / f"{name}.so"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        src, out = Path(tmp) / f"{name}.cpp", Path(tmp) / f"{name}.so"
        src.write_text(source)
        compile_flags, link_flags = _aten_flags()
        run = subprocess.run([COMPILER, *flags, *compile_flags, str(src), "-o", str(out), *link_flags],
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"{COMPILER} failed:\n{run.stderr.strip()}")
        os.replace(out, target)
    return target


def _aten_flags() -> tuple[list[str], list[str]]:
    """ATen's headers (its parallel_for and vectorised exp, not torch/extension.h and pybind11, whose
    parsing was most of a build's time) and torch's own libraries to link against."""
    from torch.utils.cpp_extension import include_paths

    lib = Path(torch.__file__).parent / "lib"
    defines = ["-DCPU_CAPABILITY=AVX2", "-DCPU_CAPABILITY_AVX2"] if "avx2" in detect().flags else []
    # the libraries after the source: a linker with --as-needed drops those named before their use
    return [*defines, *(f"-I{p}" for p in include_paths())], [f"-L{lib}", f"-Wl,-rpath,{lib}", "-ltorch_cpu", "-lc10"]


def enable() -> bool:
    """Compile (or load the cached build of) the kernel and use it for decodes; False where it cannot."""
    if _state["kernel"] is not None:
        return True
    try:
        fn = ctypes.CDLL(str(build_shared(build_name(detect().flags), SOURCE))).paged_decode
    except Exception as exc:  # no compiler, a failed build, an unloadable object: the torch path serves
        log.warning("CPU decode kernel: not built (%s: %s); decodes gather and use SDPA", type(exc).__name__,
                    str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else "")
        return False
    fn.argtypes, fn.restype = _ARGS, None
    _state["kernel"] = fn
    log.info("CPU decode kernel: built; decodes read the KV pool in place")
    return True


def disable() -> None:
    _state["kernel"] = None


def usable(q: torch.Tensor, rows) -> bool:
    """The kernel's case: float32 on the CPU, a plain pool's rows, a head size of whole 8-float vectors."""
    return (isinstance(rows, torch.Tensor) and q.dtype == rows.dtype == torch.float32 and q.device.type == "cpu"
            and q.shape[2] % 8 == 0 and rows.stride(1) == 1)


def paged_decode(q: torch.Tensor, rows: torch.Tensor, k_rows: torch.Tensor, lens: torch.Tensor, max_len: int,
                 v_delta: int) -> torch.Tensor:
    """q [Bd, num_heads, head_dim] -> [Bd, num_heads, head_dim]: query b over rows k_rows[b * max_len + t]
    (t < lens[b]) as keys, those rows + v_delta as values."""
    q = q.contiguous()
    k_rows, lens = k_rows.contiguous(), lens.contiguous()
    assert k_rows.dtype == lens.dtype == torch.int64 and rows.stride(1) == 1
    batch, num_heads, head_dim = q.shape
    out = torch.empty_like(q)
    _state["kernel"](q.data_ptr(), rows.data_ptr(), rows.stride(0), k_rows.data_ptr(), lens.data_ptr(), batch,
                     num_heads, head_dim, rows.shape[1] // head_dim, max_len, v_delta, head_dim ** -0.5,
                     out.data_ptr())
    return out
