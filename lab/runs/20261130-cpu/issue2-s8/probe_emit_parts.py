"""Cold cost of the emitter's parts: full handle vs variants (monkeypatched), 8 seqs."""
import gc, statistics, sys
from lab.host_step_cost import StepHarness, CacheEvictor, max_tokens_for, _run_sync
from lab.host_overhead import load_tokenizer
from emitter.output_stream import OutputStream
from emitter.request_emitter import RequestEmitter
import emitter.stage as ES
from stages.messages import StepEvents
tok = load_tokenizer("smollm2")
ev = CacheEvictor(64)
variant = sys.argv[1]
n, steps = 8, 160
h = StepHarness(tok, n, 2048, max_tokens_for(n, 2048, 32 + steps + 8), False, seed=1)
for s, ch in h.streams:
    s.framer = ch.sse   # as in the server
h.prefill()
for _ in range(32): h.step()
orig_push = OutputStream.push
if variant == "nopush":
    OutputStream.push = lambda self, out: self._items.append(out)
if variant == "noframe":
    for s, ch in h.streams: s.framer = None
if variant == "noevent":
    RequestEmitter.on_event = lambda self, ev: None

if variant == "inline":
    from stages.messages import RequestOutput, Abort
    from stages.trace import cpu_clock_ns, host_clock_ns
    async def handle(self, msg):
        entries = self._entries
        c0, t0 = cpu_clock_ns(), host_clock_ns()
        traces = []
        finished = []
        for event in msg.events:
            entry = entries.get(event.request_id)
            if entry is None:
                continue
            emitter, stream = entry.emitter, entry.stream
            traces.append(stream.trace)
            token_ids = event.token_ids
            if (emitter._plain and event.finish_reason is None and event.error is None
                    and len(token_ids) == 1 and not emitter.finished):
                detok = emitter._detok
                token_id = token_ids[0]
                text = None if detok._pending else detok._texts.get(token_id)
                if text is None:
                    text = detok.push_one(token_id)
                emitter.num_output_tokens += 1
                held = emitter._held_ids
                if not text:
                    held.append(token_id); continue
                if held:
                    emitter._held_ids = []; taken = held + [token_id]
                else:
                    taken = [token_id]
                out = RequestOutput(emitter.request_id, text, taken, None, None, emitter.num_prompt_tokens,
                                    emitter.num_output_tokens, emitter.num_cached_tokens, None, event.error_status, emitter.index)
            else:
                out = emitter.on_event(event)
                if out is None:
                    continue
            if stream.framer is not None and out.error is None:
                out.sse = stream.framer(out)
            stream.push(out)
            if emitter.stopped_by_string and event.finish_reason is None:
                self.scheduler_inbox.force_put(Abort(event.request_id, reason="stop"))
            if out.finish_reason is not None:
                entries.pop(event.request_id, None)
                finished.append((event.request_id, entry, out))
        if traces:
            cpu_ns = (cpu_clock_ns() - c0) // len(traces)
            wall_ns = (host_clock_ns() - t0) // len(traces)
            for trace in traces:
                trace.add_host("emit", cpu_ns, wall_ns)
        for request_id, entry, out in finished:
            self._finish(request_id, entry, out)
    ES.EmitterStage.handle = handle
if variant == "notrace":
    from stages.trace import RequestTrace
    RequestTrace.add_host = lambda self, c, w, x=None: None
gc.collect()
times = []
for i in range(steps):
    ev()
    t = h.step()
    times.append(t["emit"])
print(variant, round(statistics.median(times) / 1e3, 1))
