# In-situ per-call CPU time of the scheduler's update/schedule and the emitter's handle.
import os, time, json, atexit
if os.environ.get("STEPLOG"):
    _rows = []
    import scheduler.scheduler as S
    import emitter.stage as E
    tt = time.thread_time_ns
    _upd, _sch, _emit = S.Scheduler.update, S.Scheduler.schedule, E.EmitterStage.handle
    def update(self, batch, result):
        c = tt(); r = _upd(self, batch, result); _rows.append(("u", tt() - c, len(batch.chunks), batch.num_tokens)); return r
    def schedule(self):
        c = tt(); b = _sch(self); _rows.append(("s", tt() - c, len(b.chunks) if b else 0, b.num_tokens if b else 0)); return b
    async def handle(self, msg):
        c = tt(); await _emit(self, msg); _rows.append(("e", tt() - c, len(msg.events), 0))
    S.Scheduler.update, S.Scheduler.schedule, E.EmitterStage.handle = update, schedule, handle
    atexit.register(lambda: open(os.environ["STEPLOG"], "w").write(json.dumps(_rows)))
