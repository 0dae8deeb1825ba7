import sys
from scheduler.stage import SchedulerStage
orig = SchedulerStage._charge
def _charge(self, batch, cpu_ns, wall_ns):
    n = batch.num_tokens
    if n:
        kind = "x_dec" if n == len(batch.chunks) else "x_mix"
        for chunk in batch.chunks:
            st = self.scheduler.requests.get(chunk.request_id)
            if st is not None:
                info = st.request.trace.info
                share = cpu_ns * len(chunk.token_ids) // n
                if kind == "x_mix" and len(chunk.token_ids) > 1: k = "x_mix_own"
                else: k = kind
                info[k] = info.get(k, 0) + share
    orig(self, batch, cpu_ns, wall_ns)
SchedulerStage._charge = _charge
sys.argv = ["ttft", "serve", "--port", "8013"]
from pipeline.cli import main
main()
