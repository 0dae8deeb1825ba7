"""From a StructuredOutput's (kind, spec) to the grammar text llguidance compiles.

json_schema: the schema (JSON text), compact JSON (no free whitespace between tokens: a small
model given free whitespace can spend its whole budget on newlines); json_object: any JSON object,
the same way; regex: the pattern must match the whole output; choice: a JSON list of strings, one
of which is the whole output; grammar: Lark (llguidance's dialect), or GBNF (llama.cpp's, vLLM's
"EBNF") when it uses `::=`, converted to Lark.
"""
from __future__ import annotations

import json

import llguidance
from llguidance.gbnf_to_lark import gbnf_to_lark

from structured.backend import GrammarError

JSON_OPTIONS = {"whitespace_flexible": False}


def grammar_text(kind: str, spec: str) -> str:
    """llguidance's grammar text; GrammarError when the spec is not of its kind's shape."""
    if kind == "json_schema":
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(spec, defaults=JSON_OPTIONS)
        except ValueError as exc:
            raise GrammarError(f"the schema is not a JSON object: {exc}") from None
    if kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=JSON_OPTIONS)
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec)
    if kind == "choice":
        return llguidance.LLMatcher.grammar_from_lark(choice_lark(spec))
    if kind == "grammar":
        if "::=" in spec:
            try:
                spec = gbnf_to_lark(spec)
            except Exception as exc:  # the converter's own errors: a bad GBNF grammar
                raise GrammarError(f"not a valid GBNF grammar: {exc}") from None
        return llguidance.LLMatcher.grammar_from_lark(spec)
    raise GrammarError(f"unknown structured output kind {kind!r}")


def choice_lark(spec: str) -> str:
    """A Lark grammar whose whole output is one of the strings (JSON string literals are Lark's)."""
    choices = json.loads(spec)
    if not isinstance(choices, list) or not choices or not all(isinstance(c, str) and c for c in choices):
        raise GrammarError("choice must be a non-empty list of non-empty strings")
    return "start: " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices) + "\n"
