"""POST /v1/chat/completions, declared once: the body as a typed ChatCompletionRequest (or a 400
naming the field) and, from the same fields, its JSON Schema.

max_completion_tokens replaced max_tokens in OpenAI's chat API; both are checked, the new one wins.
Chat spells logprobs `logprobs: true` plus `top_logprobs: k`; internally it is one count (or None).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.common import CHAT_UNSUPPORTED, MaxTokens, common_fields, common_values
from protocol.requests.fields import Bool, Bound, Context, Derived, Int, Schema, Seen
from protocol.requests.logit_fields import PromptLogprobs, max_logprobs
from protocol.requests.messages import Messages, TemplateKwargs
from protocol.requests.sampling import EFFECTIVE_MAX_TOKENS, SAMPLING_FIELDS, sampling_params
from protocol.requests.spec import RequestSpec
from protocol.tool_calls.definitions import ToolRequest
from protocol.tool_calls.fields import tool_fields
from protocol.tool_calls.forced_schema import forced_output
from stages.sampling import SamplingParams

TOP_LOGPROBS_NEEDS_LOGPROBS: Schema = {
    "if": {"required": ["top_logprobs"], "properties": {"top_logprobs": {"type": "integer"}}},
    "then": {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}},
}


@dataclass(frozen=True, slots=True)
class ChatCompletionRequest:
    model: str | None
    messages: list[dict]  # {"role", "content": str} (+ "name", "tool_call_id" when given)
    params: SamplingParams  # max_tokens is a placeholder when self.max_tokens is None
    max_tokens: int | None  # None: the caller fills the rest of the context window
    stream: bool
    include_usage: bool
    add_generation_prompt: bool = True
    chat_template_kwargs: dict = field(default_factory=dict)
    priority: int = 0
    cache_salt: str | None = None
    return_timings: bool = False  # the reply carries this request's stage timings
    n: int = 1  # choices: parallel samples of the prompt
    tools: ToolRequest | None = None  # None: no tools (absent, empty)


@dataclass(frozen=True)
class TopLogprobs(Int):
    """Alternatives per position, only with logprobs=true."""

    key: str = "top_logprobs"
    lo: int = 0
    hi: Bound = max_logprobs
    doc: str = "Alternatives per position; requires logprobs=true."

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> int | None:
        top = super().parse(obj, ctx, seen)
        if top is not None and not seen["logprobs"]:
            raise bad_request("'top_logprobs' requires 'logprobs' to be true.", self.key)
        return top

    def rules(self, ctx: Context) -> list[Schema]:
        return [TOP_LOGPROBS_NEEDS_LOGPROBS]


def _effective_max_tokens(seen: Seen) -> int | None:
    newer = seen["max_completion_tokens"]
    return newer if newer is not None else seen["max_tokens"]


def _with_forced_tools(params: SamplingParams, tools: ToolRequest | None) -> SamplingParams:
    """A `required` or named tool choice's grammar in the params, known at parse time so that it
    compiles at arrival like any other (the ingress stage adds the reasoning's end to it)."""
    forced = forced_output(tools) if tools is not None else None
    if forced is None:
        return params
    if params.min_tokens:
        raise bad_request("'min_tokens' cannot be combined with a required or named tool choice.", "min_tokens")
    if params.structured is not None:
        raise bad_request("'tool_choice' required or a named function cannot be combined with another output "
                          "format (response_format, structured_outputs).", "tool_choice")
    return dataclasses.replace(params, structured=forced)


def _build(seen: Seen) -> ChatCompletionRequest:
    logprobs = (seen["top_logprobs"] or 0) if seen["logprobs"] else None
    return ChatCompletionRequest(
        messages=seen["messages"],
        params=_with_forced_tools(sampling_params(seen, logprobs, seen["prompt_logprobs"]), seen["tools"]),
        max_tokens=seen[EFFECTIVE_MAX_TOKENS],
        add_generation_prompt=seen["add_generation_prompt"],
        chat_template_kwargs=seen["chat_template_kwargs"],
        tools=seen["tools"],
        **common_values(seen),
    )


CHAT = RequestSpec((
    *common_fields(CHAT_UNSUPPORTED),
    MaxTokens("max_tokens", doc_tail=" Default: the rest of the context window."),
    MaxTokens("max_completion_tokens", doc_tail=" Wins over max_tokens when both are given."),
    Derived(EFFECTIVE_MAX_TOKENS, _effective_max_tokens),
    Bool("logprobs", False, "Report the sampled tokens' logprobs."),
    TopLogprobs(),
    PromptLogprobs(),
    *SAMPLING_FIELDS,
    Messages(),
    Bool("add_generation_prompt", True),
    TemplateKwargs(),
    *tool_fields(),
), _build)


def parse_chat_request(obj: dict, limits: IngressLimits, vocab_size: int) -> ChatCompletionRequest:
    return CHAT.parse(obj, limits, vocab_size)
