"""StructuredCheck: a request's grammar compiled beside its tokenizing, and decided before or beside
its queueing.

`start` submits the compile (structured/compiler.py: a cache hit is a finished future) as soon as
the body is parsed. After tokenizing, `settle` gives a compile still running up to GRACE_S more
(none where the timeout is not much longer), then decides one that has ended (a cached grammar, or a quick one); one still running is returned, and
the request is queued with it as its sampling gate (scheduler/sampling_gates.py): its prefill runs
beside the compile and only its first sampled token waits for it. The engine then awaits it
(`finish`) before reading the reply.

Why the grace: a gated request's last prompt token is held until the compile ends, so its first
token takes a step of its own after the prefill, one forward pass (~5-6 ms for an 8B model on an
H100: bench/results/20261207-NVIDIA-H100/structured-347ecba/). A compile that ends within about
that long costs less waited for than overlapped; most llguidance compiles do (~2-3 ms there).

A schema, regex or grammar that does not compile is a 400 naming its field; one that takes longer
than --grammar-compile-timeout-s (counted from the end of tokenizing) is a 400 naming the flag
(the compile goes on in the background and is cached for the next request); a compile that fails
for another reason is a 500 with its message. Decided after queueing, the request is aborted
before the error is answered.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import CancelledError, Future

from protocol.errors import SERVER, ApiError, bad_request
from stages.sampling import SamplingParams
from structured.backend import GrammarError
from structured.compiler import GrammarCompiler


# Seconds a compile still running after tokenizing is waited for before its request is queued
# beside it (see the module's docstring): about one forward pass of a step of its own.
GRACE_S = 0.005


class StructuredCheck:
    def __init__(self, compiler: GrammarCompiler, timeout_s: float, grace_s: float = GRACE_S) -> None:
        self.compiler = compiler
        self.timeout_s = timeout_s
        # No grace unless the timeout is longer: a compile seen done after the grace (the loop may
        # wake late) must still have ended within the timeout.
        self.grace_s = grace_s if timeout_s > 2 * grace_s else 0.0

    def start(self, params: SamplingParams) -> Future | None:
        return self.compiler.submit(params.structured) if params.structured is not None else None

    async def settle(self, pending: Future | None, params: SamplingParams) -> Future | None:
        """The compile if it is still running after the grace (the request is queued beside it);
        None when there is none or it succeeded; raises its ApiError when it failed."""
        if pending is None:
            return None
        if not pending.done() and self.grace_s > 0:
            # asyncio.wait neither raises nor cancels: the compile is shared through the cache.
            waiter = asyncio.wrap_future(pending)
            waiter.add_done_callback(_retrieved)  # its error is `pending`'s, answered from there
            await asyncio.wait([waiter], timeout=self.grace_s)
        if not pending.done():
            return pending
        try:
            error = pending.exception()
        except CancelledError:  # the compiler closed: the engine is stopping
            error = RuntimeError("the grammar compiler stopped")
        if error is not None:
            raise compile_error(error, params.structured.param) from None
        return None

    async def finish(self, pending: Future | None, params: SamplingParams) -> None:
        """Wait for the compile (raises its ApiError, or the timeout's)."""
        if pending is None:
            return
        param = params.structured.param
        try:
            # Shielded: the compile is shared through the cache, a timeout here must not cancel it.
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), self.timeout_s)
        except TimeoutError:
            raise bad_request(f"'{param}' did not compile within {self.timeout_s:g} s "
                              "(--grammar-compile-timeout-s).", param) from None
        except Exception as exc:
            raise compile_error(exc, param) from None

    async def check(self, params: SamplingParams) -> None:
        """Both at once (a caller with nothing to overlap)."""
        await self.finish(self.start(params), params)


def _retrieved(waiter: asyncio.Future) -> None:
    if not waiter.cancelled():
        waiter.exception()


def compile_error(exc: BaseException, param: str) -> ApiError:
    """A failed compile's answer: 400 for a grammar the backend refuses, 500 for anything else."""
    if isinstance(exc, GrammarError):
        return bad_request(f"'{param}' does not compile: {exc}", param)
    return ApiError(500, f"compiling '{param}' failed: {type(exc).__name__}: {exc}", SERVER, param)
