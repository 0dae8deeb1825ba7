"""Probe (twelfth session): a CUDA graph of a one-prompt fresh prefill that keeps cuDNN's SDPA.
Times eager steps against graph replays (bucket = multiple of 256, padded rows at the end) at the
Llama-3-8B shape, and compares the graph's logits with the eager step's."""
import statistics, sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path.cwd()))
from gpu_stage.attention import triton_backend as tb
from gpu_stage.cuda_graphs import CudaGraphRunner
from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from gpu_stage.step_layout import GraphShape
from stages.messages import ScheduledChunk

FORCE = [False]
orig = tb._prefill_plan
def plan(meta, q):
    if FORCE[0]:
        return tb.TritonPlan(False, 1, None, [(0, q.shape[0])])
    return orig(meta, q)
tb._prefill_plan = plan

src = load_model_source("dummy:llama-3-8b", seed=0)
runner = ModelRunner.build(src, "cuda", torch.bfloat16, 12000, 16, max_num_batched_tokens=8192, max_num_seqs=64,
                           attention_backend="triton", max_model_len=8192)
runner.warm_thread()
runner.kv_cache.kv.normal_()
buckets = (512, 1024, 1536, 2048, 3072, 4096, 8192)
FORCE[0] = True
t0 = time.perf_counter()
g = CudaGraphRunner(runner.model, runner.kv_cache, runner.inputs, 1, 8192, 8192, buckets, (), ())
g.capture()
FORCE[0] = False
print(f"fresh graphs captured in {time.perf_counter()-t0:.1f} s, pool {g.pool_bytes/2**20:.0f} MiB", flush=True)
gen = torch.Generator().manual_seed(0)
width = runner.inputs.max_blocks_per_seq

def chunks(n):
    ids = torch.randint(0, src.config.vocab_size, (n,), generator=gen).tolist()
    return [ScheduledChunk("x", ids, 0, list(range(1, 1 + -(-(n + 1) // 16))), True)]

@torch.inference_mode()
def eager(c):
    torch.cuda.synchronize(); t = time.perf_counter()
    st = runner.inputs.stage(c)
    out = runner._forward(st, runner.kv_cache)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3, out[-1].float().clone()

@torch.inference_mode()
def graph(c, bucket):
    shape = GraphShape(bucket, 1, width, False)
    torch.cuda.synchronize(); t = time.perf_counter()
    runner.inputs.stage(c, shape=shape, max_seq_len_hint=8192)
    out = g.replay(shape)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3, out[-1].float().clone()

cases = [(512, 512), (1024, 1024), (1000, 1024), (1536, 1536), (2048, 2048), (1900, 2048), (1800, 2048),
         (3072, 3072), (4096, 4096), (3900, 4096), (8192, 8192)]
for n, bucket in cases:
    c = chunks(n)
    e, gr = [], []
    for r in range(12):
        te, le = eager(c)
        tg, lg = graph(c, bucket)
        if r >= 2:
            e.append(te); gr.append(tg)
    diff = (le - lg).abs().max().item()
    print(f"n={n:5d} bucket={bucket:5d}: eager {statistics.median(e):7.2f} ms  graph {statistics.median(gr):7.2f} ms"
          f"  (min {min(e):.2f} / {min(gr):.2f})  max|dlogit| {diff:.3g} of max {le.abs().max().item():.3g}", flush=True)
