"""The torch path's cost of the V-transposed 8-bit layout on CPU (gpu_stage/kv/layout.py): store
and decode attention over an fp8 pool of each layout, one layer, one thread, Llama-3-8B heads:

    PYTHONPATH=. python lab/kv8_vt_cpu_cost.py
"""
import time

import torch

from gpu_stage.attention import torch_backend
from gpu_stage.attention.metadata import build_metadata
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv.format import KvFormat
from gpu_stage.model.config import ModelConfig
torch.set_num_threads(1)
H, HKV, D, BS, B, L = 32, 8, 128, 16, 8, 1024
cfg = ModelConfig("llama", 10, H * D, 8, 1, H, HKV, D)
nb = B * L // BS + 1
tables = [list(range(1 + i * L // BS, 1 + (i + 1) * L // BS)) for i in range(B)]
for vt in (False, True):
    cache = KvCache(cfg, nb, BS, "cpu", torch.float32, KvFormat("fp8_e4m3"), v_transposed=vt)
    layer = cache.layer(0)
    g = torch.Generator().manual_seed(0)
    k = torch.randn(B * L, HKV, D, generator=g); v = torch.randn(B * L, HKV, D, generator=g)
    meta = build_metadata([L] * B, [L] * B, tables, BS, "cpu")
    t = time.perf_counter(); torch_backend.store_kv(layer, k, v, meta); ts = time.perf_counter() - t
    q = torch.randn(B, H, D, generator=g)
    dm = build_metadata([1] * B, [L] * B, tables, BS, "cpu")
    torch_backend.forward(q, layer, dm)
    t = time.perf_counter()
    for _ in range(5): out = torch_backend.forward(q, layer, dm)
    print(f"v_transposed={vt}: store {B*L} tokens {ts*1e3:.1f} ms, decode {B}x{L} {(time.perf_counter()-t)/5*1e3:.1f} ms per layer")
