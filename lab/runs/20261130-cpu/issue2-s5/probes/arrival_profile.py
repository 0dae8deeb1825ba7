import argparse, asyncio, cProfile, io, pstats, sys, time, statistics
import lab.scheduler_in_situ as sis
from scheduler.scheduler import Scheduler
fn = Scheduler.add_request
rec = []
prof = cProfile.Profile()
def w(self, req):
    t0 = time.thread_time_ns(); r = fn(self, req); rec.append((time.thread_time_ns() - t0, len(req.prompt_token_ids)))
    return r
Scheduler.add_request = w
ap = argparse.Namespace(model=sys.argv[1], cpu_threads=None, gc_freeze=False)
asyncio.run(sis._serve(ap, {"schedule": [], "update": [], "emit": []}))
for n in (30, 1000):
    xs = [ns / 1e3 for ns, k in rec if k == n]
    print(n, "tokens: add_request us median", round(statistics.median(xs), 1), "max", round(max(xs), 1), len(xs))
# cProfile pass
def w2(self, req):
    prof.enable(); r = fn(self, req); prof.disable(); return r
Scheduler.add_request = w2
asyncio.run(sis._serve(ap, {"schedule": [], "update": [], "emit": []}))
out = io.StringIO(); pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(18); print(out.getvalue()[:3500])
