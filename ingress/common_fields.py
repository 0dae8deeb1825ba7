"""Request-level fields both endpoints share: unsupported parameters, n, streaming, model, priority.

Unsupported parameters are refused, never ignored: a client that asks for JSON mode, tools or
best_of=4 and silently gets plain sampling would trust an answer it did not ask for. Each entry says
which value is inert (the value that asks for nothing: best_of=1, echo=false, tools=[], ...), so that
clients which always send defaults keep working. Fields we do not know at all are ignored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ingress.errors import bad_request
from ingress.field_checks import INT64_MIN, opt_bool, opt_dict, opt_int, opt_str, type_error
from ingress.limits import IngressLimits

MAX_CACHE_SALT_CHARS = 1024


def _never(value: Any) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class UnsupportedTable:
    """(field, is_inert(value), hint) rows. `null` is always inert and never reaches the predicate."""

    rows: tuple[tuple[str, Callable[[Any], bool], str], ...]
    keys: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", frozenset(key for key, _, _ in self.rows))

    def extended(self, *rows: tuple[str, Callable[[Any], bool], str]) -> UnsupportedTable:
        return UnsupportedTable(self.rows + rows)


COMMON_UNSUPPORTED = UnsupportedTable((
    ("best_of", lambda v: type(v) is int and v == 1, " (only best_of=1)"),
    ("suffix", lambda v: v == "", ""),
    ("tools", lambda v: v == [], ""),
    ("tool_choice", lambda v: v == "none", " (only \"none\")"),
    ("functions", lambda v: v == [], ""),
    ("function_call", lambda v: v == "none", " (only \"none\")"),
    ("response_format", lambda v: v == {"type": "text"}, " (only {\"type\": \"text\"})"),
    ("modalities", lambda v: v == ["text"], " (only [\"text\"])"),
    ("audio", _never, ""),
    # vLLM extensions that would change the output if honoured.
    ("use_beam_search", lambda v: v is False, ""),
    ("guided_json", _never, ""),
    ("guided_regex", _never, ""),
    ("guided_choice", _never, ""),
    ("guided_grammar", _never, ""),
    ("structured_outputs", _never, ""),
    ("allowed_token_ids", lambda v: v == [], ""),
    ("bad_words", lambda v: v == [], ""),
    ("logits_processors", lambda v: v == [], ""),
    ("truncate_prompt_tokens", _never, ""),
))

CHAT_UNSUPPORTED = COMMON_UNSUPPORTED.extended(
    ("echo", lambda v: v is False, " (only echo=false on chat; /v1/completions echoes the prompt)"),
    ("continue_final_message", lambda v: v is False, " (only false)"),
    ("chat_template", _never, " (the server's template is used)"),
    ("documents", lambda v: v == [], ""),
)


def reject_unsupported(obj: dict, table: UnsupportedTable) -> None:
    present = table.keys.intersection(obj)  # usually empty: one C-level set operation
    if not present:
        return
    for key, is_inert, hint in table.rows:
        if key in present:
            value = obj[key]
            if value is not None and not is_inert(value):
                raise bad_request(f"'{key}' is not supported by this server{hint}.", key,
                                  "unsupported_parameter")


def parse_n(obj: dict, limits: IngressLimits) -> int:
    """Choices (parallel samples) to generate: 1..max_n."""
    n = opt_int(obj, "n", 1, lo=1)
    if n > limits.max_n:
        raise bad_request(f"'n' is {n}; this server allows at most {limits.max_n}.", "n")
    return n


@dataclass(slots=True)
class CommonFields:
    model: str | None  # the caller checks that it names a served model
    n: int  # choices to generate (parallel samples of one prompt)
    stream: bool
    include_usage: bool  # stream_options.include_usage
    priority: int
    cache_salt: str | None


def parse_common(obj: dict, limits: IngressLimits, table: UnsupportedTable) -> CommonFields:
    model = opt_str(obj, "model")
    reject_unsupported(obj, table)
    n = parse_n(obj, limits)
    stream = opt_bool(obj, "stream", False)
    include_usage = False
    options = opt_dict(obj, "stream_options")
    if options is not None:
        if not stream:
            raise bad_request("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        value = options.get("include_usage")
        if value is not None:
            if value is not True and value is not False:
                raise type_error("stream_options.include_usage", "a boolean", value)
            include_usage = value
    return CommonFields(
        model=model,
        n=n,
        stream=stream,
        include_usage=include_usage,
        priority=opt_int(obj, "priority", 0, INT64_MIN, 2**63 - 1),
        cache_salt=opt_str(obj, "cache_salt", non_empty=True, max_chars=MAX_CACHE_SALT_CHARS),
    )
