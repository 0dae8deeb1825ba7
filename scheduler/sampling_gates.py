"""SamplingGates: requests whose first sampled token waits for something outside the scheduler.

A constrained request whose grammar is still compiling when its prompt is ready is queued anyway
(GenerateRequest.sampling_gate: the compile's Future), so that its prefill overlaps the compile:
the first token's mask is the first thing that needs the grammar. While its gate is pending the
request holds back one token (`RequestState.num_held_tokens`): every chunk stops before the last
known token, whose logits would sample, so no row of it is sampled and the runner never waits for
the compile. A request with nothing left to compute but that token sits out the walk (`runnable`)
without blocking the queue behind it. When the gate opens (the compile succeeded) the token is
released and the next step schedules it as any other (catch-up scheduling: no special path). So a
late compile delays its own first token at most, never another request's step. A gate that fails
(a grammar that does not compile) never opens: the request is held until the abort that the
engine sends with its 400 (pipeline/pending_grammar.py), so that no row of it is ever sampled.

The stage wakes the scheduler when a gate opens (it may have nothing else to do). With no gate
pending, the scheduler only tests an empty dict per step: unconstrained requests, and constrained
ones whose grammar was cached, pay nothing.
"""
from __future__ import annotations

from concurrent.futures import Future

from scheduler.request_state import RequestState, RequestStatus


class SamplingGates:
    def __init__(self) -> None:
        self.pending: dict[str, RequestState] = {}  # request id -> its state, while its gate is pending
        self.num_held = 0  # since start: requests queued with their gate pending

    def add(self, req: RequestState) -> bool:
        """At arrival: hold `req`'s sampling token if its gate is still pending -> whether it is."""
        gate = req.request.sampling_gate
        if gate is None or is_open(gate):
            return False
        req.num_held_tokens = 1
        self.pending[req.request_id] = req
        self.num_held += 1
        return True

    def sweep(self) -> None:
        """Before a step: release the requests whose gate opened; forget those that ended."""
        for request_id, req in list(self.pending.items()):
            if req.status is RequestStatus.FINISHED or is_open(req.request.sampling_gate):
                req.num_held_tokens = 0
                del self.pending[request_id]

    def runnable(self, running: list[RequestState]) -> list[RequestState]:
        """`running` less the held requests that have nothing to compute before their held token."""
        pending = self.pending
        return [req for req in running
                if req.request_id not in pending or len(req.all_token_ids) - req.num_computed_tokens > 1]


def is_open(gate: Future) -> bool:
    """Done, and not by failing (nor cancelled: the compiler closed as the engine stops)."""
    return gate.done() and not gate.cancelled() and gate.exception() is None
