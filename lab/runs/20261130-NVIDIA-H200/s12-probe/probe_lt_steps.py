"""Probe (twelfth session): the runner's prefill steps with each product's cuBLASLt algorithm picked
by a sustained timing (probe_lt.Gemm), against torch's choice, interleaved A B A B."""
import statistics, sys, time
from pathlib import Path
import torch
import torch.nn.functional as F
sys.path.insert(0, str(Path.cwd()))
sys.path.insert(0, str(Path(__file__).parent))
sys.argv = [sys.argv[0]]
import probe_lt_lib as lt  # the Gemm class of probe_lt.py, without its sweep
from bench.gpu_prefill import Bench
from gpu_stage.loaders import load_model_source
from gpu_stage.model_runner import ModelRunner
from stages.messages import NewRequestData, ScheduledChunk

src = load_model_source("dummy:llama-3-8b", seed=0)
runner = ModelRunner.build(src, "cuda", torch.bfloat16, 12000, 16, max_num_batched_tokens=8192, max_num_seqs=64,
                           attention_backend="triton", max_model_len=8192)
runner.warm_thread()
runner.kv_cache.kv.normal_()
ops = runner.model.ops
USE = [False]
best: dict = {}
orig_linear = ops.linear

def pick(M, N, K, w):
    g = lt.Gemm(M, N, K)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    ref = F.linear(x, w)
    times = []
    for i in range(g.n):
        g.run(i, x, w, y)
        torch.cuda.synchronize()
        if (y - ref).abs().max().item() > 0.05:
            continue
        times.append((lt.timed(lambda: g.run(i, x, w, y), 0.15, 10), i))
    base = lt.timed(lambda: torch.mm(x, w.t(), out=y), 0.15, 10)
    times.sort()
    print(f"  pick M={M} N={N} K={K}: torch {base:.1f} us, algos {[(round(t, 1), i) for t, i in times[:3]]}", flush=True)
    return g, times[0][1]

def linear(x, weight, bias=None):
    if not USE[0] or bias is not None or x.shape[0] < 512 or x.dim() != 2:
        return orig_linear(x, weight, bias)
    M, K = x.shape
    N = weight.shape[0]
    key = (M, N, K)
    if key not in best:
        best[key] = pick(M, N, K, weight)
    g, i = best[key]
    y = torch.empty(M, N, device=x.device, dtype=x.dtype)
    g.run(i, x.contiguous(), weight, y)
    return y

from gpu_stage.kernels import activation as _activation
ops.linear = linear
ops.gate_up_silu = lambda x, w: _activation.silu_and_mul(linear(x, w))
bench = Bench(runner, src.config.vocab_size)
gen = torch.Generator().manual_seed(0)

def step(n, prompts):
    width = -(-(n + 1) // 16)
    rids = [f"s{bench.step}-{i}" for i in range(prompts)]
    ids = [torch.randint(0, src.config.vocab_size, (n,), generator=gen).tolist() for _ in rids]
    new = [NewRequestData(r, p, lt_params()) for r, p in zip(rids, ids)]
    ms = bench.execute([ScheduledChunk(r, p, 0, list(range(1 + i * width, 1 + (i + 1) * width)), True)
                        for i, (r, p) in enumerate(zip(rids, ids))], new)
    bench.execute([], finished=rids)
    return ms

def lt_params():
    from stages.sampling import SamplingParams
    return SamplingParams(temperature=0.0)

for n, prompts, reps in ((2048, 1, 10), (8192, 1, 5), (2048, 4, 5), (1024, 1, 10)):
    USE[0] = True
    step(n, prompts); step(n, prompts)  # pick the algorithms, warm
    USE[0] = False
    step(n, prompts); step(n, prompts)
    a, b = [], []
    for r in range(reps):
        for use, out in ((False, a), (True, b)):
            USE[0] = use
            out.append(step(n, prompts))
    USE[0] = False
    print(f"{prompts}x{n}: torch {statistics.median(a):8.2f} ms (min {min(a):.2f})   "
          f"lt-picked {statistics.median(b):8.2f} ms (min {min(b):.2f})", flush=True)
