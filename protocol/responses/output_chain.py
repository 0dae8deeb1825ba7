"""The output-parser chain of a chat reply: reasoning first, then tools, each turning a step's text
into content / reasoning_content / tool_calls pieces (an OutputDelta).

An OutputPlan is decided once, at arrival (which parsers, and whether the prompt opened a `<think>`
block); each choice of the reply gets its own chain from it. A request with no plan never builds
one: its chunks take the plain content path.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from protocol.reasoning.parser import REASONING_PARSERS, ThinkParser, prompt_opens_reasoning
from protocol.tool_calls.definitions import ToolRequest
from protocol.tool_calls.deltas import OutputDelta
from protocol.tool_calls.parser import ToolCallParser
from protocol.tool_calls.registry import TOOL_CALL_PARSERS, new_parser, parser_class
from protocol.tool_calls.single_call import SingleCall
from stages.sampling import SamplingParams


@dataclass(frozen=True, slots=True)
class OutputParsers:
    """The server's parsers (`--tool-call-parser`, `--reasoning-parser`); None: off."""

    tool_call_parser: str | None = None
    reasoning_parser: str | None = None

    def __post_init__(self) -> None:
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_CALL_PARSERS:
            raise ValueError(f"unknown tool call parser {self.tool_call_parser!r}")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            raise ValueError(f"unknown reasoning parser {self.reasoning_parser!r}")

    @property
    def any(self) -> bool:
        return self.tool_call_parser is not None or self.reasoning_parser is not None

    def tool_format(self) -> type[ToolCallParser] | None:
        return TOOL_CALL_PARSERS[self.tool_call_parser] if self.tool_call_parser else None


class OutputChain:
    """One choice's parsers, fed its text in order."""

    __slots__ = ("reasoning", "tools")

    def __init__(self, reasoning: ThinkParser | None, tools: ToolCallParser | SingleCall | None) -> None:
        self.reasoning = reasoning
        self.tools = tools

    def feed(self, text: str) -> OutputDelta:
        return self._step(text, final=False)

    def finish(self) -> OutputDelta:
        return self._step("", final=True)

    def _step(self, text: str, final: bool) -> OutputDelta:
        reasoning = ""
        if self.reasoning is not None:
            reasoning, text = self.reasoning.finish() if final else self.reasoning.feed(text)
        if self.tools is None:
            return OutputDelta(content=text, reasoning=reasoning)
        out = self.tools.feed(text) if text else OutputDelta()
        if final:
            out.extend(self.tools.finish())
        out.reasoning = reasoning
        return out

    def finish_reason(self, reason: str | None) -> str | None:
        """OpenAI's "tool_calls" for a reply that ended by itself after calling tools."""
        if reason == "stop" and self.tools is not None and self.tools.num_calls:
            return "tool_calls"
        return reason


@dataclass(frozen=True, slots=True)
class OutputPlan:
    reasoning: type[ThinkParser] | None
    prompt_opens_reasoning: bool
    tools: ToolRequest | None
    tool_call_parser: str | None

    @property
    def has_reasoning(self) -> bool:
        return self.reasoning is not None

    @property
    def parses_tools(self) -> bool:
        return self.tools is not None and parser_class(self.tools, self.tool_call_parser) is not None

    def new_chain(self) -> OutputChain:
        reasoning = self.reasoning(self.prompt_opens_reasoning) if self.reasoning is not None else None
        tools = new_parser(self.tools, self.tool_call_parser) if self.tools is not None else None
        return OutputChain(reasoning, tools)

    def starts_in_reasoning(self) -> bool:
        return self.reasoning is not None and (self.prompt_opens_reasoning or self.reasoning.always_starts_in_reasoning)


def plan_output(tools: ToolRequest | None, parsers: OutputParsers, prompt_tail: str) -> OutputPlan | None:
    """How a chat reply is parsed; None when it is plain content. `prompt_tail`: the end of the
    rendered prompt (whether it left a `<think>` block open)."""
    reasoning = REASONING_PARSERS[parsers.reasoning_parser] if parsers.reasoning_parser else None
    plan = OutputPlan(reasoning, prompt_opens_reasoning(prompt_tail), tools, parsers.tool_call_parser)
    return plan if plan.has_reasoning or plan.parses_tools else None


def planned_params(params: SamplingParams, plan: OutputPlan, think_end_ids: tuple[int, ...]) -> SamplingParams:
    """The sampling parameters a plan needs: a grammar (a forced tool choice's, or a
    response_format's) applies after the reasoning when the reply starts in it; the auto parsers
    whose markers are control tokens (Mistral's [TOOL_CALLS], Llama's <|python_tag|>) need special
    tokens kept in the text, as vLLM does."""
    changes: dict = {}
    if params.structured is not None and plan.starts_in_reasoning():
        changes["structured"] = dataclasses.replace(params.structured, after_token_ids=think_end_ids)
    if plan.tools is not None:
        cls = parser_class(plan.tools, plan.tool_call_parser)
        if cls is not None and cls.needs_special_tokens:
            changes["skip_special_tokens"] = False
    return dataclasses.replace(params, **changes) if changes else params
