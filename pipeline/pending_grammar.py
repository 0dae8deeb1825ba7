"""A request queued while its grammar still compiles: the engine awaits the compile after admitting it.

Ingress queues a constrained request without waiting for a compile that outlasts the tokenizer
(ingress/structured_check.py), so that the prefill runs beside it; the scheduler holds back only the
request's first sampled token until the compile is done (scheduler/sampling_gates.py). Whoever
reads the reply (an HTTP route, an embedder's generate) first awaits the compile here: nothing of
the reply can come before it. A compile that fails or is late past --grammar-compile-timeout-s is
still the 400 it was before queueing: the request is aborted, and the error is raised once its
every choice has ended (its blocks freed), so that a refused request leaves nothing behind.
"""
from __future__ import annotations

from emitter.reply import Reply
from ingress.prepared import PreparedRequest
from ingress.stage import IngressStage
from protocol.errors import ApiError


async def await_pending_grammar(reply: Reply, prepared: PreparedRequest, ingress: IngressStage) -> None:
    """Wait for `prepared`'s compile (`grammar_pending`); its ApiError once `reply` has ended."""
    try:
        await ingress.finish_grammar(prepared.grammar_pending, prepared.params)
    except ApiError:
        reply.abort()
        await drain(reply)
        raise
    except BaseException:  # the reader went away (cancelled) meanwhile
        reply.abort()
        raise


async def drain(reply: Reply) -> None:
    """Read an aborted reply until each of its choices has ended."""
    num_left = reply.num_choices
    while num_left:
        if (await reply.get()).finish_reason is not None:
            num_left -= 1
