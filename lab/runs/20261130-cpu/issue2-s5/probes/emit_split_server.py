import sys
from stages.trace import RequestTrace
orig = RequestTrace.add_host
def add_host(self, category, work_ns, wall_ns=None):
    if category == "emit":
        key = "x_sse" if wall_ns is None else "x_stage"
        self.info[key] = self.info.get(key, 0) + work_ns
    orig(self, category, work_ns, wall_ns)
RequestTrace.add_host = add_host
sys.argv = ["ttft", "serve", "--port", "8013"]
from pipeline.cli import main
main()
