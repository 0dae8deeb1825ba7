"""How every CUDA graph of ttft is captured: no Python garbage collection during the capture, and
the capture's error mode limited to its own thread.

A collection inside a capture can free another engine's dead CUDA graphs (a reference cycle), and
destroying a graph while a stream captures invalidates that capture (cudaErrorStreamCaptureInvalidated,
"operation not permitted when stream is capturing": an engine built right after another was dropped).
torch.cuda.graph no longer collects before a capture, so we do, once per batch of captures.
thread_local: other threads (the event loop, a stopping GPU stage) may still make CUDA calls that are
unsafe during a global-mode capture; they are not the capture's business.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

import torch

CAPTURE_ERROR_MODE = "thread_local"


@contextlib.contextmanager
def gc_frozen(collect: bool = True) -> Iterator[None]:
    """Collect (optionally) now, then no collection until the block ends; the collector's state is
    restored on the way out, exception or not."""
    if collect:
        gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def capturing(graph: torch.cuda.CUDAGraph, pool=None) -> Iterator[None]:
    """torch.cuda.graph(graph, pool) in ttft's capture mode, without a collection inside it."""
    with gc_frozen(collect=False), torch.cuda.graph(graph, pool=pool, capture_error_mode=CAPTURE_ERROR_MODE):
        yield
