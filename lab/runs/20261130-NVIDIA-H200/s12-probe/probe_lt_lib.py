"""Library part of probe_lt.py (twelfth session): every cuBLASLt algorithm the heuristic offers for the model's products,
timed sustained (the board at its power limit) against torch's F.linear. ctypes on libcublasLt."""
import ctypes, glob, os, sys, time
import torch
import torch.nn.functional as F

def find_lib():
    import nvidia  # the pip CUDA libraries torch uses
    for base in list(nvidia.__path__):
        for p in sorted(glob.glob(os.path.join(base, "**", "libcublasLt.so*"), recursive=True)):
            return p
    return "libcublasLt.so"

torch.zeros(1, device="cuda") @ torch.zeros(1, device="cuda")
lib = ctypes.CDLL(find_lib())
print("cublasLt", find_lib(), "version", lib.cublasLtGetVersion(), flush=True)
vp = ctypes.c_void_p
def ck(s, what):
    if s != 0:
        raise RuntimeError(f"{what}: status {s}")

class Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]
class Heur(ctypes.Structure):
    _fields_ = [("algo", Algo), ("workspaceSize", ctypes.c_size_t), ("state", ctypes.c_int),
                ("wavesCount", ctypes.c_float), ("reserved", ctypes.c_int * 4)]

handle = vp(); ck(lib.cublasLtCreate(ctypes.byref(handle)), "create")
WS = 64 << 20
workspace = torch.empty(WS, dtype=torch.uint8, device="cuda")

def layout(rows, cols, ld):
    l = vp(); ck(lib.cublasLtMatrixLayoutCreate(ctypes.byref(l), 14, ctypes.c_uint64(rows), ctypes.c_uint64(cols),
                                                ctypes.c_int64(ld)), "layout")
    return l

class Gemm:
    """y[M, N] = x[M, K] @ W[N, K]^T in column-major terms: D[N, M] = op_T(A[K, N]) @ B[K, M]."""
    def __init__(self, M, N, K, count=24):
        self.desc = vp(); ck(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), 68, 0), "desc")
        t, n = ctypes.c_int32(1), ctypes.c_int32(0)
        ck(lib.cublasLtMatmulDescSetAttribute(self.desc, 3, ctypes.byref(t), 4), "transa")
        ck(lib.cublasLtMatmulDescSetAttribute(self.desc, 4, ctypes.byref(n), 4), "transb")
        self.a, self.b, self.d = layout(K, N, K), layout(K, M, K), layout(N, M, N)
        pref = vp(); ck(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "pref")
        ws = ctypes.c_uint64(WS)
        ck(lib.cublasLtMatmulPreferenceSetAttribute(pref, 1, ctypes.byref(ws), 8), "pref ws")
        self.heur = (Heur * count)(); got = ctypes.c_int(0)
        ck(lib.cublasLtMatmulAlgoGetHeuristic(handle, self.desc, self.a, self.b, self.d, self.d, pref, count,
                                               self.heur, ctypes.byref(got)), "heuristic")
        self.n = got.value
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def run(self, i, x, w, y):
        h = self.heur[i]
        ck(lib.cublasLtMatmul(handle, self.desc, ctypes.byref(self.alpha), vp(w.data_ptr()), self.a,
                              vp(x.data_ptr()), self.b, ctypes.byref(self.beta), vp(y.data_ptr()), self.d,
                              vp(y.data_ptr()), self.d, ctypes.byref(h.algo), vp(workspace.data_ptr()),
                              ctypes.c_size_t(WS), vp(torch.cuda.current_stream().cuda_stream)), "matmul")

def timed(fn, heat_s, reps):
    """Run fn for heat_s (the board settles at its power limit), then time reps calls."""
    t_end = time.perf_counter() + heat_s
    while time.perf_counter() < t_end:
        for _ in range(8):
            fn()
        torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(reps):
        fn()
    e1.record(); torch.cuda.synchronize()
    return e0.elapsed_time(e1) / reps * 1e3  # us

