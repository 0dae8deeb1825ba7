"""The packaged files one streaming chat request runs through, from its bytes to its first SSE chunk.

    PYTHONPATH=$PWD python -m lab.request_path [--json]

Starts the app in-process on the CPU (`dummy:tiny`), answers one warm-up request, then calls the
ASGI app directly with a second streaming /v1/chat/completions body while a profile hook
(`sys.setprofile`, and `threading.setprofile` for the engine's threads, installed before the
engine starts them) records every Python frame that runs, in every thread, until the first
`http.response.body` with bytes reaches `send`. Prints:

- the sorted set of packaged files whose code ran (pipeline/, stages/, ingress/, scheduler/,
  gpu_stage/, emitter/, protocol/);
- the packaged files whose code names SSE / OpenAI framing (the names in `FRAMING`);
- how many times the request enters the routes' module: a call into it from another file, or the
  resumption of one of its coroutines (the event loop handing control back to it).

With `--ttft N` it times N requests instead (no profile hook): microseconds from the ASGI call to the
first SSE write, P10/P50/P90; run it against two trees back to back to compare them.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import tokenize
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages", "ingress", "scheduler", "gpu_stage", "emitter", "protocol")
ROUTES = ("pipeline/openai_routes.py", "pipeline/chat_routes.py", "pipeline/generate_routes.py")
# The names of SSE / OpenAI response framing (the builders of chunk, body and event bytes, and
# the bytes an output carried): a file whose code (not its comments or strings) names one of them
# frames, or carries framed bytes.
FRAMING = frozenset({
    "sse", "sse_event", "sse_error", "SSE_DONE", "framer", "error_payload", "ChatChunker", "CompletionChunker",
    "role_chunk", "usage_chunk", "chat_body", "completion_body", "ResponseAccumulator", "EventStreamResponse",
})
BODY = {"messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 4, "stream": True,
        "temperature": 0}


def packaged(filename: str) -> str | None:
    """The file's path relative to the repository when it belongs to a package, else None."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    return rel.as_posix() if rel.parts and rel.parts[0] in PACKAGES else None


class PathRecorder:
    """A profile function for every thread; records only while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.files: set[str] = set()
        self.route_entries = 0
        self._names: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def _file(self, frame) -> str | None:
        name = frame.f_code.co_filename
        if name not in self._names:
            self._names[name] = packaged(name)
        return self._names[name]

    def __call__(self, frame, event: str, arg) -> None:
        if not self.on or event != "call":
            return
        here = self._file(frame)
        if here is None:
            return
        with self._lock:
            self.files.add(here)
            if here in ROUTES:
                caller = frame.f_back
                if caller is None or self._file(caller) != here:
                    self.route_entries += 1


async def _first_chunk(app, recorder: PathRecorder | None, clock: list[int] | None = None) -> bytes:
    """One streaming chat request through the ASGI app; the bytes of its first SSE write (recording
    stops as `send` receives them), after which the reply is read to its end. `clock` gets the
    nanoseconds from the call to that first write."""
    body = orjson.dumps(BODY)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
             "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    done = asyncio.Event()
    sent = {"body": False}
    chunks: list[bytes] = []

    async def receive():
        if not sent["body"]:
            sent["body"] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.body" and message.get("body"):
            if not chunks:
                if recorder is not None:
                    recorder.on = False
                if clock is not None:
                    clock.append(time.perf_counter_ns() - t0)
            chunks.append(message["body"])

    if recorder is not None:
        recorder.on = True
    t0 = time.perf_counter_ns()
    await app(scope, receive, send)
    done.set()
    assert chunks and chunks[-1].endswith(b"data: [DONE]\n\n"), chunks
    return chunks[0]


def names_in(path: Path) -> set[str]:
    """The identifiers of a file's code (attribute names included; comments and strings not)."""
    with path.open("rb") as f:
        return {tok.string for tok in tokenize.tokenize(f.readline) if tok.type == tokenize.NAME}


def framing_files() -> list[str]:
    return [path.relative_to(ROOT).as_posix() for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py")) if FRAMING & names_in(path)]


async def time_to_first_chunk(num_requests: int) -> list[float]:
    """Microseconds from the ASGI call to the first SSE write, one request at a time, no profiling."""
    from pipeline import Engine, EngineConfig
    from pipeline.app import create_app

    clock: list[int] = []
    config = EngineConfig(model="dummy:tiny", device="cpu", max_model_len=256, num_kv_blocks=64)
    async with Engine(config) as engine:
        app = create_app(engine)
        await _first_chunk(app, None)
        for _ in range(num_requests):
            await _first_chunk(app, None, clock)
    return sorted(ns / 1e3 for ns in clock)


async def measure() -> dict:
    from pipeline import Engine, EngineConfig
    from pipeline.app import create_app

    recorder = PathRecorder()
    sys.setprofile(recorder)
    threading.setprofile(recorder)  # the engine's threads start after this
    try:
        config = EngineConfig(model="dummy:tiny", device="cpu", max_model_len=256, num_kv_blocks=64)
        async with Engine(config) as engine:
            app = create_app(engine)
            await _first_chunk(app, None)  # warm-up: lazy imports and first-use paths
            first = await _first_chunk(app, recorder)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return {"files": sorted(recorder.files), "num_files": len(recorder.files),
            "route_entries": recorder.route_entries, "framing_files": framing_files(),
            "first_chunk": first.decode()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--ttft", type=int, default=0, metavar="N",
                        help="instead: time N requests' first chunk (P10/P50/P90 in us)")
    args = parser.parse_args()
    if args.ttft:
        us = asyncio.run(time_to_first_chunk(args.ttft))
        print(json.dumps({q: round(us[int(q[1:]) * len(us) // 100], 1) for q in ("p10", "p50", "p90")}))
        return
    result = asyncio.run(measure())
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"files crossed, bytes to first SSE chunk ({result['num_files']}):")
    for name in result["files"]:
        print(f"  {name}")
    print(f"entries into the routes' module: {result['route_entries']}")
    print(f"files with SSE / OpenAI framing code ({len(result['framing_files'])}):")
    for name in result["framing_files"]:
        print(f"  {name}")


if __name__ == "__main__":
    main()
