"""What reading a request for routing costs the router (router/request_key.py's `routed_request`: the
body parsed, the prompt cut into blocks and hashed), by prompt length, best of 5 x 100 calls.

    PYTHONPATH=$PWD python lab/routed_request_cost.py
    cd /tmp && PYTHONPATH=/work/main python /work/wt-NAME/lab/routed_request_cost.py   # another checkout's
"""
from __future__ import annotations

import os
import timeit

import orjson

import router.request_key as request_key

if __name__ == "__main__":
    print(f"# {request_key.__file__}, load {os.getloadavg()}")
    for num_chars in (200, 4000, 32000):
        body = orjson.dumps({"model": "m", "prompt": "x " * (num_chars // 2), "stream": True})
        best = min(timeit.repeat(lambda: request_key.routed_request(body), number=100, repeat=5)) / 100
        print(f"prompt {num_chars} chars: routed_request {best * 1e6:.1f} us")
