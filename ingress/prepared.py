"""PreparedRequest: one request ready for the engine, the one value the engine admits.

The HTTP routes get it from the ingress stage (parsed, validated, tokenized, checked against the
window); embedders build it from token ids and SamplingParams. The engine admits all its sequences
(a batch's prompts, each with its n samples) or none.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from protocol.requests.chat import ChatCompletionRequest
from protocol.requests.completion import CompletionRequest
from protocol.responses.output_chain import OutputPlan
from stages.sampling import SamplingParams
from stages.trace import RequestTrace


@dataclass(slots=True)
class PreparedRequest:
    request_id: str
    prompts_token_ids: list[list[int]]  # one prompt, or a batch's (completions), each its own request
    params: SamplingParams  # max_tokens filled in (the same for every prompt of a batch)
    trace: RequestTrace
    n: int = 1  # choices: samples of each prompt
    priority: int = 0
    cache_salt: str | None = None
    # What the protocol room frames the reply from (None for embedders): the typed request, and
    # completions' echo, each prompt as text (token ids decoded).
    api: CompletionRequest | ChatCompletionRequest | None = None
    echo_texts: list[str] | None = None
    output_plan: OutputPlan | None = None  # chat: how the reply is parsed (tools, reasoning)
    # Its grammar's compile, still running when the prompt was ready: the request is queued beside
    # it (its first sampled token waits for it), and Engine.admit awaits it. None: nothing pending.
    grammar_pending: Future | None = None

    @property
    def prompt_token_ids(self) -> list[int]:
        """The first prompt's ids (the only prompt, unless a batch)."""
        return self.prompts_token_ids[0]
