"""StructuredOutput: what a request's output must match, as the sampler's grammar reads it.

The protocol room builds one from `response_format`, vLLM's `structured_outputs` or a tool choice
that must be followed (`required`, a named function); embedders put one in SamplingParams. It is
the grammar's source text, not a compiled grammar, so it is immutable and crosses threads as it is;
compiled grammars are cached by (kind, spec).
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("json_schema", "json_object", "regex", "choice", "grammar")


@dataclass(frozen=True, slots=True)
class StructuredOutput:
    # json_schema: the schema as JSON text; json_object: "" (any JSON object); regex: the pattern;
    # choice: a JSON list of the allowed strings; grammar: a Lark / EBNF grammar.
    kind: str
    spec: str
    # Token ids that open the constrained part: the grammar applies only after the output has
    # produced them (a reasoning parser's `</think>`); empty: from the first output token.
    after_token_ids: tuple[int, ...] = ()
    # The body field it came from ("response_format.json_schema.schema"), which a 400 names.
    param: str = "structured_outputs"
