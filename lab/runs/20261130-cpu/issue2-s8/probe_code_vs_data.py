"""Is the cold host step slow because code is cold or because data is cold?"""
import gc, statistics, sys
from lab.host_step_cost import StepHarness, CacheEvictor, max_tokens_for, PHASES
from lab.host_overhead import load_tokenizer
tok = load_tokenizer("smollm2")
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
steps = 96
ev = CacheEvictor(64)
def mk(seed):
    h = StepHarness(tok, n, 2048, max_tokens_for(n, 2048, 32 + 3 * steps), False, seed=seed)
    h.prefill()
    for _ in range(32): h.step()
    return h
A, B = mk(1), mk(2)
gc.collect()
res = {"cold": [], "warm_code": [], "hot": []}
for i in range(steps):
    ev(); res["cold"].append(A.step())
    ev(); B.step(); res["warm_code"].append(A.step())
    res["hot"].append(A.step())
for k, v in res.items():
    print(k, {p: round(statistics.median(t[p] for t in v) / 1e3, 1) for p in PHASES},
          round(sum(statistics.median(t[p] for t in v) for p in PHASES) / 1e3, 1))
