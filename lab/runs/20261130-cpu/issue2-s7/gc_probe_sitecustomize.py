import gc, time, os, atexit, json, threading
_ev = []
_t = {}
def _cb(phase, info):
    if phase == "start":
        _t[threading.get_ident()] = time.perf_counter_ns()
    else:
        t0 = _t.pop(threading.get_ident(), None)
        if t0 is not None:
            _ev.append((time.time(), info["generation"], (time.perf_counter_ns() - t0) / 1e6, threading.current_thread().name, info.get("collected", 0)))
if os.environ.get("GCLOG"):
    gc.callbacks.append(_cb)
    atexit.register(lambda: open(os.environ["GCLOG"], "w").write(json.dumps(_ev)))
