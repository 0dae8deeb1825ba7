"""IngressStage: bytes in, a validated and tokenized request out.

It runs inside the HTTP handler's own task: parsing and validation cost microseconds, and a hop
through an inbox would add an event-loop turn to every request. Tokenizing (and chat-template
rendering) of long inputs goes to a small thread pool, so a 1 MB prompt never stalls the loop; its
bound is the pool's queue, and the limits checked first keep that queue's jobs small. /tokenize and
/detokenize run here too, with the same limits and the same pool.
"""
from __future__ import annotations

import asyncio
import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ingress.chat_template import ChatTemplate
from ingress.errors import ApiError, bad_request
from ingress.field_checks import check_token_ids
from ingress.limits import IngressLimits
from ingress.parser import parse_json_body
from ingress.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    check_context_length,
    parse_chat_request,
    parse_completion_request,
)
from ingress.tokenize_schema import (
    DetokenizeRequest,
    TokenizeRequest,
    parse_detokenize_request,
    parse_tokenize_request,
)
from ingress.tokenizer import Tokenizer
from stages.sampling import SamplingParams
from stages.trace import RequestTrace, cpu_clock_ns, host_clock_ns


@dataclass(slots=True)
class PreparedRequest:
    api: CompletionRequest | ChatCompletionRequest
    prompts_token_ids: list[list[int]]  # one prompt, or a batch's (completions), each its own request
    params: SamplingParams  # max_tokens filled in (the same for every prompt of a batch)
    echo_texts: list[str] | None = None  # completions' echo: each prompt as text (token ids decoded)

    @property
    def prompt_token_ids(self) -> list[int]:
        """The first prompt's ids (the only prompt, unless a batch)."""
        return self.prompts_token_ids[0]


class IngressStage:
    def __init__(
        self,
        tokenizer: Tokenizer,
        chat_template: ChatTemplate,
        limits: IngressLimits,
        max_model_len: int,
        offload_chars: int,
        num_threads: int,
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.limits = limits
        self.max_model_len = max_model_len
        self.offload_chars = offload_chars
        self._pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="ttft-tok")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _parse(self, body: bytes, trace: RequestTrace, parse_request):
        """Bytes to a validated request: one orjson pass, then the schema (ApiError on bad input)."""
        t0 = host_clock_ns()  # microseconds on the event loop: the monotonic clock (stages/trace.py)
        req = parse_request(parse_json_body(body, self.limits), self.limits, self.tokenizer.vocab_size)
        trace.mark("parsed")
        trace.add_host("parse", host_clock_ns() - t0)
        return req

    async def prepare_completion(self, body: bytes, trace: RequestTrace) -> PreparedRequest:
        req: CompletionRequest = self._parse(body, trace, parse_completion_request)
        if isinstance(req.prompt, str):  # a batch is of one kind: all texts here
            num_chars = sum(map(len, req.prompts))
            prompts = await self._run(trace, num_chars, self._encode_texts, req.prompts)
        else:
            prompts = [list(ids) for ids in req.prompts]
            trace.mark("tokenized")
        prepared = self._finish(req, prompts, trace)
        if req.echo:  # each prompt's text as given, or its ids decoded (off the loop when long)
            prepared.echo_texts = list(req.prompts) if isinstance(req.prompt, str) else await self._run_text(
                sum(map(len, prompts)), self._decode_all, prompts)
        return prepared

    async def prepare_chat(self, body: bytes, trace: RequestTrace) -> PreparedRequest:
        req: ChatCompletionRequest = self._parse(body, trace, parse_chat_request)
        num_chars = sum(_content_chars(m) for m in req.messages)
        ids = await self._run(trace, num_chars, self._encode_chat, req)
        return self._finish(req, [ids], trace)

    async def encode_prompt(self, prompt: str | list[int], trace: RequestTrace) -> list[int]:
        """For embedders: text (with the model's BOS rule; long text off the loop) or ids, checked
        against the vocabulary as the HTTP routes check them (an id past the embedding table would
        fail the model's step, and with it every request in that step)."""
        if isinstance(prompt, str):
            return await self._run(trace, len(prompt), self._encode_text, prompt)
        trace.mark("tokenized")
        return check_token_ids("prompt", list(prompt), self.tokenizer.vocab_size, allow_empty=True)

    def parse_tokenize(self, body: bytes) -> TokenizeRequest:
        return parse_tokenize_request(parse_json_body(body, self.limits), self.limits)

    def parse_detokenize(self, body: bytes) -> DetokenizeRequest:
        return parse_detokenize_request(parse_json_body(body, self.limits), self.limits, self.tokenizer.vocab_size)

    async def tokenize(self, req: TokenizeRequest) -> list[int]:
        """POST /tokenize: the prompt's ids, or the rendered chat's."""
        if req.messages is None:
            return await self._run(None, len(req.prompt), self._encode_plain, req)
        num_chars = sum(_content_chars(m) for m in req.messages)
        return await self._run(None, num_chars, self._encode_tokenize_chat, req)

    async def detokenize(self, req: DetokenizeRequest) -> str:
        """POST /detokenize: the ids' text, special tokens included (as vLLM decodes them)."""
        return await self._run(None, len(req.tokens), self._decode, req.tokens)

    def _encode_plain(self, req: TokenizeRequest) -> list[int]:
        return self.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)

    def _encode_tokenize_chat(self, req: TokenizeRequest) -> list[int]:
        text = self._render(req.messages, req.add_generation_prompt, req.chat_template_kwargs)
        return self.tokenizer.encode(text, add_special_tokens=req.add_special_tokens)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True)

    def _encode_texts(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(text, add_special_tokens=True) for text in texts]

    def _decode_all(self, prompts: list[list[int]]) -> list[str]:
        return [self.tokenizer.decode(ids, skip_special_tokens=False) for ids in prompts]

    async def _run_text(self, size: int, fn, arg) -> list[str]:
        if size > self.offload_chars:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, arg)
        return fn(arg)

    def _encode_chat(self, req: ChatCompletionRequest) -> list[int]:
        text = self._render(req.messages, req.add_generation_prompt, req.chat_template_kwargs)
        # The template writes its own special tokens (BOS included): never add them twice.
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _render(self, messages: list[dict], add_generation_prompt: bool, kwargs: dict) -> str:
        """The chat template's text; a template that fails on these messages is the client's 400
        with the template's own message (raise_exception's text, or the Jinja error)."""
        try:
            return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        except ValueError as exc:
            raise bad_request(f"messages could not be rendered by the chat template: {exc}", "messages") from None

    async def _run(self, trace: RequestTrace | None, num_chars: int, fn, arg):
        """fn(arg), in the pool when the input is long; timed on `trace` when there is one."""
        if num_chars > self.offload_chars:
            # Host work is the tokenizer's own run time in its thread; the wait for that thread
            # (a free core) is recorded apart, so that it can be told from work.
            t0 = time.perf_counter_ns()
            ids, work_ns, wall_ns = await asyncio.get_running_loop().run_in_executor(self._pool, _timed, fn, arg)
            if trace is not None:
                trace.info["tokenize_wall_ms"] = round((time.perf_counter_ns() - t0) / 1e6, 4)
        else:
            ids, work_ns, wall_ns = _timed(fn, arg)
        if trace is not None:
            trace.add_host("tokenize", work_ns, wall_ns)
            trace.mark("tokenized")
        return ids

    def _finish(self, req, prompts: list[list[int]], trace: RequestTrace) -> PreparedRequest:
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
        return PreparedRequest(req, prompts, params)


def _timed(fn, arg) -> tuple[object, int, int]:
    """The tokenizer's own CPU time and its wall time: in a worker thread it runs beside the
    model's thread, and its wall time counts the waits for a core and for the interpreter lock."""
    c0, t0 = cpu_clock_ns(), host_clock_ns()
    ids = fn(arg)
    return ids, cpu_clock_ns() - c0, host_clock_ns() - t0


def _content_chars(message: dict) -> int:
    content = message.get("content")
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return 0


__all__ = ["IngressStage", "PreparedRequest", "ApiError"]
