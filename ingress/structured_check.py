"""StructuredCheck: a request's grammar compiled before it is queued, beside its tokenizing.

`start` submits the compile (structured/compiler.py: a cache hit is a finished future) as soon as
the body is parsed; `finish` awaits it after the prompt is tokenized. A schema, regex or grammar
that does not compile is a 400 naming its field; one that takes longer than
--grammar-compile-timeout-s is a 400 naming the flag (the compile goes on in the background and is
cached for the next request); a compile that fails for another reason is a 500 with its message.
"""
from __future__ import annotations

import asyncio
from concurrent.futures import Future

from protocol.errors import SERVER, ApiError, bad_request
from stages.sampling import SamplingParams
from structured.backend import GrammarError
from structured.compiler import GrammarCompiler


class StructuredCheck:
    def __init__(self, compiler: GrammarCompiler, timeout_s: float) -> None:
        self.compiler = compiler
        self.timeout_s = timeout_s

    def start(self, params: SamplingParams) -> Future | None:
        return self.compiler.submit(params.structured) if params.structured is not None else None

    async def finish(self, pending: Future | None, params: SamplingParams) -> None:
        if pending is None:
            return
        param = params.structured.param
        try:
            # Shielded: the compile is shared through the cache, a timeout here must not cancel it.
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(pending)), self.timeout_s)
        except GrammarError as exc:
            raise bad_request(f"'{param}' does not compile: {exc}", param) from None
        except TimeoutError:
            raise bad_request(f"'{param}' did not compile within {self.timeout_s:g} s "
                              "(--grammar-compile-timeout-s).", param) from None
        except Exception as exc:
            raise ApiError(500, f"compiling '{param}' failed: {type(exc).__name__}: {exc}", SERVER, param) from None

    async def check(self, params: SamplingParams) -> None:
        """Both at once (an embedder's request, already tokenized)."""
        await self.finish(self.start(params), params)
