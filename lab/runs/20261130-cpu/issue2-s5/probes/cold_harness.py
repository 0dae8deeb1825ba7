"""Cold-cache A/B harness: the server's scheduler config, 16 long (1000) + 16 short (30) prompts, 8 at a time,
64 output tokens; a 64 MB write between calls evicts caches, as the model's step does."""
import random, statistics, time, sys, gc
import numpy as np
from scheduler.config import SchedulerConfig
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace
EVICT = np.ones(256 << 20, dtype=np.uint8)
def evict():
    EVICT[::64].sum()
def run(seed):
    cfg = SchedulerConfig(num_blocks=1456, block_size=16, max_num_batched_tokens=512, max_model_len=8192,
                          long_prefill_threshold=256, enable_prefix_caching=True, eos_token_ids=frozenset({0}))
    s = Scheduler(cfg)
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, 40000) for _ in range(1000 if i % 2 == 0 else 30)] for i in range(32)]
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)
    nxt = 0; live = 0
    sched = {"p": [], "d": []}; upd = {"p": [], "d": []}
    n = 0
    while nxt < 32 or s.has_work():
        while live < 8 and nxt < 32:
            g = GenerateRequest(f"r{nxt}", prompts[nxt], params, RequestTrace(f"r{nxt}")); evict()
            t0 = time.thread_time_ns(); s.add_request(g); ADD["l" if len(g.prompt_token_ids) > 100 else "s"].append(time.thread_time_ns() - t0)
            nxt += 1; live += 1
        evict()
        t0 = time.thread_time_ns(); b = s.schedule(); dt = time.thread_time_ns() - t0
        if b is None: break
        kind = "d" if b.num_tokens == len(b.chunks) else "p"
        sched[kind].append(dt / (len(b.chunks) if kind == "d" else 1))
        res = StepResult(b.step_id, [SampledToken(c.request_id, rng.randrange(100, 40000)) for c in b.chunks if c.sample])
        evict()
        t0 = time.thread_time_ns(); ev = s.update(b, res); dt = time.thread_time_ns() - t0
        upd[kind].append(dt / (len(b.chunks) if kind == "d" else 1))
        live -= sum(1 for e in ev if e.finish_reason)
    return sched, upd
gc.disable()
ADD={'l':[],'s':[]}
out = {k: [] for k in ("sp", "sd", "up", "ud")}
for seed in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    sc, up = run(seed)
    out["sp"] += sc["p"]; out["sd"] += sc["d"]; out["up"] += up["p"]; out["ud"] += up["d"]
print('add long', statistics.median(ADD['l'])/1e3, 'short', statistics.median(ADD['s'])/1e3); print(" ".join(f"{k} {statistics.median(v)/1e3:.2f}us(n={len(v)})" for k, v in out.items()))
