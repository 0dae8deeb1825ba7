"""GrammarCompiler: compiles StructuredOutputs on its own threads, once per distinct (kind, spec).

Ingress submits a request's grammar at arrival, before tokenizing; the compile runs beside the
tokenizer and, when it outlasts it, beside the request's queueing and prefill (ingress/
structured_check.py). The runner hook looks the compiled grammar up when the request first
samples, which waits for the compile's end: by the same key, a hit. Compiled grammars stay in an LRU of `max_cached` entries; a
failed compile is not kept (the next request retries and gets the same error, cheaply).

The backend is built on the first thread that needs it (the tokenizer bridge takes ~0.5 s); the
engine calls `warm` at start-up so that no request pays for that.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

from structured.backend import CompiledGrammar, GrammarBackend
from stages.structured import StructuredOutput

MAX_CACHED = 512
NUM_THREADS = 2

Key = tuple[str, str]


class GrammarCompiler:
    def __init__(self, make_backend: Callable[[], GrammarBackend], max_cached: int = MAX_CACHED,
                 num_threads: int = NUM_THREADS) -> None:
        self._make_backend = make_backend
        self._backend: GrammarBackend | None = None
        self._backend_lock = threading.Lock()
        self._cache: OrderedDict[Key, Future[CompiledGrammar]] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(num_threads, thread_name_prefix="ttft-grammar")
        self.max_cached = max_cached
        self.num_compiles = 0  # compiles started (cache misses)

    @property
    def backend(self) -> GrammarBackend:
        with self._backend_lock:
            if self._backend is None:
                self._backend = self._make_backend()
            return self._backend

    def warm(self) -> Future[GrammarBackend]:
        """Build the backend on a compile thread now."""
        return self._pool.submit(lambda: self.backend)

    def submit(self, structured: StructuredOutput) -> Future[CompiledGrammar]:
        """The compiled grammar, or the compile in progress (started now on a miss)."""
        key = (structured.kind, structured.spec)
        with self._lock:
            future = self._cache.get(key)
            if future is not None:
                self._cache.move_to_end(key)
                return future
            future = self._pool.submit(self._compile, key)
            self._cache[key] = future
            self.num_compiles += 1
            while len(self._cache) > self.max_cached:
                self._cache.popitem(last=False)
        future.add_done_callback(lambda f: f.exception() is not None and self._forget(key, f))
        return future

    def compiled(self, structured: StructuredOutput) -> CompiledGrammar:
        """The compiled grammar, waiting for its compile (raises what the compile raised)."""
        return self.submit(structured).result()

    def _compile(self, key: Key) -> CompiledGrammar:
        return self.backend.compile(*key)

    def _forget(self, key: Key, future: Future) -> None:
        with self._lock:
            if self._cache.get(key) is future:
                del self._cache[key]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
