"""stages/process_exit.py: the process ends with its status after its non-daemon threads, the
threading exit hooks and the atexit functions, with what it printed flushed, and without the
interpreter's teardown (an object's __del__ at module teardown never runs)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = r"""
import atexit, sys, threading, time
from pathlib import Path
from stages.process_exit import end_process

out = Path(sys.argv[1])
order = []

def late_writer():
    time.sleep(0.2)  # still running when end_process is called: it must be waited for
    order.append("thread")

class Teardown:
    def __init__(self, path):
        self.path, self.open = path, open  # the builtins are gone by the time teardown reaches this

    def __del__(self):
        with self.open(self.path, "w") as f:
            f.write("ran")

kept = Teardown(str(out / "teardown"))  # collected only by the interpreter's teardown
threading.Thread(target=late_writer).start()
threading._register_atexit(lambda: order.append("threading hook"))
atexit.register(lambda: out.joinpath("order").write_text(",".join(order + ["atexit"])))
sys.stdout.write("unflushed line")  # a pipe: block-buffered until a flush
end_process(7)
"""


def test_end_process_keeps_what_exit_promises_and_skips_the_teardown(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout == "unflushed line"
    assert (tmp_path / "order").read_text() == "threading hook,thread,atexit"
    assert not (tmp_path / "teardown").exists()


def test_ttft_ends_with_its_commands_status():
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--max-n", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("ttft serve: error: --max-n 0"), proc.stderr
