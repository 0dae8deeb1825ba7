"""How a ttft process (the `ttft` command, a tensor-parallel worker) ends once its work has
returned: everything Python promises at exit, then `os._exit`, without the interpreter's teardown.

That teardown (collecting every module's objects, then the C++ libraries' static destructors and
the allocator's consolidation of torch's heap) does nothing the kernel does not do anyway when the
process ends, and after a server with torch loaded it takes about a second: a second added to every
restart under a supervisor and to every stop that a driver, a test or a benchmark waits for. What a
program may rely on still runs, in the interpreter's order: the `threading` exit hooks (which close
a tensor-parallel driver's workers) and the join of every non-daemon thread, then the `atexit`
functions (logging's flush, multiprocessing's joins, `weakref.finalize` clean-ups), then the flush
of stdout and stderr.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def end_process(code: int) -> NoReturn:
    """Exit with status `code` after the thread joins, the atexit functions and the flushes."""
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter calls first at exit
    atexit._run_exitfuncs()  # then these, in reverse order of registration
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to say there
            pass
    os._exit(code)
