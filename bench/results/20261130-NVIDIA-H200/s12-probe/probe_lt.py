"""Probe (twelfth session): every cuBLASLt algorithm the heuristic offers for the model's products,
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
