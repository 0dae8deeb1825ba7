"""cProfile of Scheduler.schedule()/update() in prefill-holding steps, in situ (embedded engine)."""
import argparse, asyncio, cProfile, io, pstats, sys
import lab.scheduler_in_situ as sis
from scheduler.scheduler import Scheduler

stats = {"schedule": None, "update": None}
def wrap(name):
    fn = getattr(Scheduler, name)
    def w(self, *a):
        pr = cProfile.Profile()
        pr.enable(); r = fn(self, *a); pr.disable()
        batch = a[0] if a else r
        if batch is not None and batch.num_tokens != len(batch.chunks):
            s = stats[name]
            if s is None:
                stats[name] = pstats.Stats(pr)
            else:
                s.add(pr)
        return r
    setattr(Scheduler, name, w)
wrap("schedule"); wrap("update")
ap = argparse.Namespace(model=sys.argv[1], cpu_threads=None, gc_freeze=False)
asyncio.run(sis._serve(ap, {"schedule": [], "update": [], "emit": []}))
for name, s in stats.items():
    out = io.StringIO()
    s.stream = out
    s.sort_stats("cumulative").print_stats(28)
    print(f"===== {name}"); print(out.getvalue()[:6000])
