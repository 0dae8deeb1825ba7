"""The few cuBLASLt calls ttft needs, through ctypes: the algorithms cuBLASLt's heuristic offers for
a product y = x @ W^T (bf16 or fp16 in and out, fp32 accumulation), and a run of one of them.

torch's F.linear runs the heuristic's first choice. Timed at the model's shapes on an H200, another
of its top eight is often 2-7% faster (gemm_tuning.py picks per shape and row count at start-up),
but torch exposes no way to choose: hence this binding of libcublasLt, the library torch itself
loads. Only split-free algorithms are offered (SPLITK_NUM 1): one program owns each output element
and walks the whole contraction in the order its tile fixes, so a product's result does not depend
on the algorithm's parallel reduction (deterministic, and within one rounding of F.linear's).

Row-major torch tensors are column-major transposes, so y [M, N] = x [M, K] @ W [N, K]^T is the
column-major D [N, M] = op_T(A [K, N]) @ B [K, M], A = W, B = x ("TN", as torch calls it).
"""
from __future__ import annotations

import ctypes
import functools
import glob
import os
from dataclasses import dataclass

import torch

_CUDA_R_16F, _CUDA_R_16BF, _CUDA_R_32F = 2, 14, 0
_DTYPES = {torch.float16: _CUDA_R_16F, torch.bfloat16: _CUDA_R_16BF}
_COMPUTE_32F = 68
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_PREF_MAX_WORKSPACE, _PREF_ALIGN_A, _PREF_ALIGN_B, _PREF_ALIGN_C, _PREF_ALIGN_D = 1, 5, 6, 7, 8
_CONFIG_SPLITK_NUM = 2
ALIGNMENT = 16  # bytes every operand's address must be a multiple of (asked of the heuristic)
WORKSPACE_BYTES = 32 << 20


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def _library_path() -> str:
    """libcublasLt from the nvidia wheels torch depends on, else the loader's search path."""
    try:
        import nvidia
    except ImportError:
        return "libcublasLt.so"
    for base in nvidia.__path__:
        found = sorted(glob.glob(os.path.join(base, "**", "libcublasLt.so*"), recursive=True))
        if found:
            return found[0]
    return "libcublasLt.so"


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt {what} failed with status {status}")


@dataclass(frozen=True)
class LtAlgo:
    """One algorithm of a product's heuristic list (its opaque 64 bytes) and its rank there."""

    raw: bytes
    rank: int


class Lt:
    """A cuBLASLt handle and workspace on one device. Not thread-safe: one thread runs the steps."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)  # makes the context
        with torch.cuda.device(device):
            torch.cuda.current_blas_handle()  # torch loads its CUDA libraries before ctypes does
        self.lib = ctypes.CDLL(_library_path())
        self.handle = ctypes.c_void_p()
        _check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "create")
        self._one, self._zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def product(self, rows: int, out_features: int, in_features: int, dtype: torch.dtype) -> "LtProduct":
        return LtProduct(self, rows, out_features, in_features, dtype)


class LtProduct:
    """y [rows, N] = x [rows, K] @ W [N, K]^T for fixed shapes: the descriptors cuBLASLt needs."""

    def __init__(self, lt: Lt, rows: int, n: int, k: int, dtype: torch.dtype) -> None:
        self.lt, self.rows, self.n, self.k, self.dtype = lt, rows, n, k, dtype
        lib = lt.lib
        self.desc = ctypes.c_void_p()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), _COMPUTE_32F, _CUDA_R_32F), "desc")
        for attr, op in ((_DESC_TRANSA, 1), (_DESC_TRANSB, 0)):
            value = ctypes.c_int32(op)
            _check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(value), 4), "transpose")
        kind = _DTYPES[dtype]
        self.a = self._layout(kind, k, n, k)
        self.b = self._layout(kind, k, rows, k)
        self.d = self._layout(kind, n, rows, n)

    def _layout(self, kind: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
        layout = ctypes.c_void_p()
        _check(self.lt.lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), kind, ctypes.c_uint64(rows),
                                                      ctypes.c_uint64(cols), ctypes.c_int64(ld)), "layout")
        return layout

    def __del__(self) -> None:
        lib = getattr(getattr(self, "lt", None), "lib", None)
        if lib is None:
            return
        for layout in (getattr(self, name, None) for name in ("a", "b", "d")):
            if layout:
                lib.cublasLtMatrixLayoutDestroy(layout)
        if getattr(self, "desc", None):
            lib.cublasLtMatmulDescDestroy(self.desc)

    def algorithms(self, count: int = 8) -> list[LtAlgo]:
        """The heuristic's first `count` split-free algorithms, best first by its estimate."""
        lib = self.lt.lib
        pref = ctypes.c_void_p()
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference")
        try:
            for attr, value in ((_PREF_MAX_WORKSPACE, ctypes.c_uint64(WORKSPACE_BYTES)),
                                *((a, ctypes.c_uint32(ALIGNMENT)) for a in (_PREF_ALIGN_A, _PREF_ALIGN_B,
                                                                           _PREF_ALIGN_C, _PREF_ALIGN_D))):
                _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(value),
                                                                ctypes.sizeof(value)), "preference attribute")
            results = (_Heuristic * count)()
            found = ctypes.c_int(0)
            _check(lib.cublasLtMatmulAlgoGetHeuristic(self.lt.handle, self.desc, self.a, self.b, self.d, self.d,
                                                      pref, count, results, ctypes.byref(found)), "heuristic")
        finally:
            lib.cublasLtMatmulPreferenceDestroy(pref)
        return [LtAlgo(bytes(results[i].algo), i) for i in range(found.value)
                if results[i].state == 0 and _split_k(lib, results[i].algo) == 1]

    def supports(self, algo: LtAlgo) -> bool:
        """Whether `algo` (found for another row count of the same weight) runs this product."""
        result = _Heuristic()
        status = self.lt.lib.cublasLtMatmulAlgoCheck(self.lt.handle, self.desc, self.a, self.b, self.d, self.d,
                                                     ctypes.byref(_Algo.from_buffer_copy(algo.raw)),
                                                     ctypes.byref(result))
        return status == 0 and result.workspace_size <= WORKSPACE_BYTES

    def run(self, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, algo: LtAlgo) -> None:
        """out [rows, N] = x @ weight^T on the current stream (captured by a CUDA graph like any launch)."""
        lt = self.lt
        raw = _Algo.from_buffer_copy(algo.raw)
        _check(lt.lib.cublasLtMatmul(
            lt.handle, self.desc, ctypes.byref(lt._one), ctypes.c_void_p(weight.data_ptr()), self.a,
            ctypes.c_void_p(x.data_ptr()), self.b, ctypes.byref(lt._zero), ctypes.c_void_p(out.data_ptr()), self.d,
            ctypes.c_void_p(out.data_ptr()), self.d, ctypes.byref(raw), ctypes.c_void_p(lt.workspace.data_ptr()),
            ctypes.c_size_t(WORKSPACE_BYTES), ctypes.c_void_p(torch.cuda.current_stream(lt.device).cuda_stream)),
            "matmul")


def _split_k(lib: ctypes.CDLL, algo: _Algo) -> int:
    value, written = ctypes.c_int32(0), ctypes.c_size_t(0)
    _check(lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), _CONFIG_SPLITK_NUM, ctypes.byref(value),
                                                    4, ctypes.byref(written)), "algorithm attribute")
    return value.value


def supports_dtype(dtype: torch.dtype) -> bool:
    return dtype in _DTYPES


def operands_fit(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether x and weight are laid out as LtProduct assumes (dense rows, aligned addresses)."""
    return (x.dim() == 2 and x.stride(1) == 1 and x.stride(0) == x.shape[1] and weight.is_contiguous()
            and x.data_ptr() % ALIGNMENT == 0 and weight.data_ptr() % ALIGNMENT == 0)


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """Whether libcublasLt loads here (CUDA builds of torch ship it)."""
    if not torch.cuda.is_available():
        return False
    try:
        ctypes.CDLL(_library_path())
    except OSError:
        return False
    return True
