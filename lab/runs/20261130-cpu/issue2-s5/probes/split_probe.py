"""In-situ schedule()/update() CPU per call, split: prefill-holding steps vs decode-only steps (no inner wrappers)."""
import asyncio, sys, time, statistics, json, argparse
import lab.scheduler_in_situ as sis
from scheduler.scheduler import Scheduler
rec = {"schedule": {"p": [], "d": []}, "update": {"p": [], "d": []}}
def top(name):
    fn = getattr(Scheduler, name)
    def w(self, *a):
        t0 = time.thread_time_ns(); r = fn(self, *a); dt = time.thread_time_ns() - t0
        batch = a[0] if a else r
        if batch is not None:
            rec[name]["d" if batch.num_tokens == len(batch.chunks) else "p"].append((dt, len(batch.chunks)))
        return r
    setattr(Scheduler, name, w)
top("schedule"); top("update")
ap = argparse.Namespace(model=sys.argv[1], cpu_threads=None, gc_freeze=False)
asyncio.run(sis._serve(ap, {"schedule": [], "update": [], "emit": []}))
out = {}
for name, d in rec.items():
    out[name] = {"prefill_steps": len(d["p"]), "prefill_step_us_median": round(statistics.median(x for x, _ in d["p"]) / 1e3, 1),
                 "decode_steps": len(d["d"]), "decode_us_per_request_median": round(statistics.median(x / n for x, n in d["d"]) / 1e3, 2)}
print(json.dumps({"model": sys.argv[1], **out}))
