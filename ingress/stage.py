"""IngressStage: bytes in, a validated and tokenized request (PreparedRequest) out.

It runs inside the HTTP handler's own task: parsing and validation cost microseconds, and a hop
through an inbox would add an event-loop turn to every request. The protocol room's declarations
validate the body; tokenizing (and chat-template rendering) of long inputs goes to the tokenizer
pool, so a 1 MB prompt never stalls the loop. /tokenize and /detokenize run here too, with the same
limits and the same pool.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import Future
from typing import Callable

from ingress.chat_template import ChatTemplate
from ingress.prepared import PreparedRequest
from ingress.prompt_codec import PromptCodec, content_chars
from ingress.structured_check import StructuredCheck
from ingress.tokenizer import Tokenizer
from ingress.tokenizer_pool import TokenizerPool
from protocol.errors import bad_request
from protocol.json_body import parse_json_body
from protocol.limits import IngressLimits
from protocol.requests.chat import ChatCompletionRequest, parse_chat_request
from protocol.requests.completion import CompletionRequest, parse_completion_request
from protocol.requests.context_length import check_context_length
from protocol.requests.field_checks import check_token_ids
from protocol.responses.output_chain import OutputParsers, plan_output, planned_params
from protocol.requests.tokenize import (
    DetokenizeRequest,
    TokenizeRequest,
    parse_detokenize_request,
    parse_tokenize_request,
)
from stages.sampling import SamplingParams
from stages.trace import RequestTrace, host_clock_ns


# The prompt's last tokens decide whether it left a <think> block open ("<think>\n" and a margin).
_PROMPT_TAIL_TOKENS = 8


class IngressStage:
    def __init__(
        self,
        tokenizer: Tokenizer,
        chat_template: ChatTemplate,
        limits: IngressLimits,
        max_model_len: int,
        offload_chars: int,
        num_threads: int,
        parsers: OutputParsers | None = None,
        structured: StructuredCheck | None = None,
    ) -> None:
        """`parsers`: the server's tool-call and reasoning parsers (none when None)."""
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.limits = limits
        self.max_model_len = max_model_len
        self.parsers = parsers or OutputParsers()
        self.codec = PromptCodec(tokenizer, chat_template, self.parsers.tool_format())
        self.pool = TokenizerPool(offload_chars, num_threads)
        # The grammar of a forced tool choice waits for these when the reply starts in reasoning
        # (tokenized at the first request that needs them).
        self._think_end_ids: tuple[int, ...] | None = None
        self.structured = structured  # None: a request asking for structured output is refused

    def close(self) -> None:
        self.pool.close()

    def _parse(self, body: bytes, trace: RequestTrace, parse_request: Callable):
        """Bytes to a validated request: one orjson pass, then the declaration's rules (ApiError on
        bad input)."""
        t0 = host_clock_ns()  # microseconds on the event loop: the monotonic clock (stages/trace.py)
        req = parse_request(parse_json_body(body, self.limits), self.limits, self.tokenizer.vocab_size)
        trace.mark("parsed")
        trace.add_host("parse", host_clock_ns() - t0)
        return req

    async def prepare_completion(self, body: bytes, trace: RequestTrace) -> PreparedRequest:
        req: CompletionRequest = self._parse(body, trace, parse_completion_request)
        grammar = self.start_grammar(req.params)
        if isinstance(req.prompt, str):  # a batch is of one kind: all texts here
            prompts = await self.pool.run(trace, sum(map(len, req.prompts)), self.codec.encode_texts, req.prompts)
        else:
            prompts = [list(ids) for ids in req.prompts]
            trace.mark("tokenized")
        pending = await self.settle_grammar(grammar, req.params) if grammar is not None else None
        prepared = self._finish(req, prompts, trace)
        prepared.grammar_pending = pending
        if req.echo:  # each prompt's text as given, or its ids decoded (off the loop when long)
            prepared.echo_texts = list(req.prompts) if isinstance(req.prompt, str) else await self.pool.run(
                None, sum(map(len, prompts)), self.codec.decode_all, prompts)
        return prepared

    async def prepare_chat(self, body: bytes, trace: RequestTrace) -> PreparedRequest:
        req: ChatCompletionRequest = self._parse(body, trace, parse_chat_request)
        grammar = self.start_grammar(req.params)  # a response_format's or a forced tool choice's
        num_chars = content_chars(req.messages) + (req.tools.num_chars if req.tools is not None else 0)
        ids = await self.pool.run(trace, num_chars, self.codec.encode_chat, req)
        pending = await self.settle_grammar(grammar, req.params) if grammar is not None else None
        prepared = self._finish(req, [ids], trace)
        prepared.grammar_pending = pending
        if req.tools is not None or self.parsers.reasoning_parser is not None:
            self._plan_output(prepared, req, ids)
        return prepared

    def _plan_output(self, prepared: PreparedRequest, req: ChatCompletionRequest, ids: list[int]) -> None:
        """How the reply is parsed, and what the plan asks of the sampler (a forced call's grammar)."""
        tail = self.tokenizer.decode(ids[-_PROMPT_TAIL_TOKENS:], skip_special_tokens=False)
        plan = plan_output(req.tools, self.parsers, tail)
        if plan is not None:
            if self._think_end_ids is None:
                self._think_end_ids = tuple(self.tokenizer.encode("</think>", add_special_tokens=False))
            prepared.output_plan = plan
            prepared.params = planned_params(prepared.params, plan, self._think_end_ids)

    def start_grammar(self, params: SamplingParams) -> Future | None:
        """The request's grammar compile, started now (it runs beside the tokenizer)."""
        if params.structured is None:
            return None
        if self.structured is None:
            raise bad_request("structured outputs are not available on this server.", params.structured.param)
        return self.structured.start(params)

    async def settle_grammar(self, grammar: Future, params: SamplingParams) -> Future | None:
        """After tokenizing (and a short grace): a compile that failed is its ApiError now; one still
        running is the request's to be queued beside (PreparedRequest.grammar_pending); else None."""
        return await self.structured.settle(grammar, params)

    async def finish_grammar(self, pending: Future, params: SamplingParams) -> None:
        """Wait for a compile the request was queued beside (its ApiError when it fails)."""
        await self.structured.finish(pending, params)

    async def encode_prompt(self, prompt: str | list[int], trace: RequestTrace) -> list[int]:
        """For embedders: text (with the model's BOS rule; long text off the loop) or ids, checked
        against the vocabulary as the HTTP routes check them (an id past the embedding table would
        fail the model's step, and with it every request in that step)."""
        if isinstance(prompt, str):
            return await self.pool.run(trace, len(prompt), self.codec.encode_text, prompt)
        trace.mark("tokenized")
        return check_token_ids("prompt", list(prompt), self.tokenizer.vocab_size, allow_empty=True)

    def parse_tokenize(self, body: bytes) -> TokenizeRequest:
        return parse_tokenize_request(parse_json_body(body, self.limits), self.limits)

    def parse_detokenize(self, body: bytes) -> DetokenizeRequest:
        return parse_detokenize_request(parse_json_body(body, self.limits), self.limits, self.tokenizer.vocab_size)

    async def tokenize(self, req: TokenizeRequest) -> list[int]:
        """POST /tokenize: the prompt's ids, or the rendered chat's."""
        if req.messages is None:
            return await self.pool.run(None, len(req.prompt), self.codec.encode_plain, req)
        num_chars = content_chars(req.messages) + (req.tools.num_chars if req.tools is not None else 0)
        return await self.pool.run(None, num_chars, self.codec.encode_tokenize_chat, req)

    async def detokenize(self, req: DetokenizeRequest) -> str:
        """POST /detokenize: the ids' text, special tokens included (as vLLM decodes them)."""
        return await self.pool.run(None, len(req.tokens), self.codec.decode, req.tokens)

    def _finish(self, req: CompletionRequest | ChatCompletionRequest, prompts: list[list[int]],
                trace: RequestTrace) -> PreparedRequest:
        """Every prompt checked against the window. A batch comes from completions, whose max_tokens
        is always explicit: the effective max_tokens is the same for each of its prompts."""
        chat = isinstance(req, ChatCompletionRequest)
        max_tokens = req.max_tokens
        for index, ids in enumerate(prompts):
            param = "messages" if chat else "prompt" if len(prompts) == 1 else f"prompt[{index}]"
            max_tokens = check_context_length(
                len(ids), req.max_tokens, self.max_model_len, max_tokens_cap=self.limits.max_tokens_cap,
                prompt_param=param,
            )
        params = dataclasses.replace(req.params, max_tokens=max_tokens)
        trace.info["num_prompt_tokens"] = len(prompts[0])
        return PreparedRequest(trace.request_id, prompts, params, trace, req.n, req.priority, req.cache_salt, req)
