"""POST /tokenize and /detokenize (vLLM's routes), declared once: the bodies as typed requests (or a
400 naming the field) and, from the same fields, their JSON Schemas.

/tokenize takes a `prompt` (text, with the model's special tokens unless add_special_tokens is
false) or chat `messages` (rendered by the chat template, add_generation_prompt as on chat
completions; the template writes its own special tokens, so add_special_tokens defaults to false;
`tools` and `tool_choice` as chat completions reads them, so that the count is the prompt a chat with
those tools runs), never both: two shapes (vLLM's TokenizeCompletionRequest and TokenizeChatRequest), the schema's
`oneOf`. /detokenize takes `tokens`, ids of the vocabulary. The limits are the generation routes'
(characters, messages, ids), checked before any tokenizing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from protocol.errors import bad_request
from protocol.limits import IngressLimits
from protocol.requests.field_checks import check_token_ids, type_error
from protocol.requests.fields import NULL_ONLY, Bool, Context, Field, ModelName, Schema, Seen, token_id
from protocol.requests.messages import Messages, TemplateKwargs
from protocol.requests.spec import RequestSpec
from protocol.requests.unsupported import Unsupported, UnsupportedTable
from protocol.tool_calls.definitions import ToolRequest
from protocol.tool_calls.fields import tool_fields

# vLLM fields that would change the answer if honoured; accepted only with their inert value.
TOKENIZE_UNSUPPORTED = UnsupportedTable((
    Unsupported("return_token_strs", False, " (only false: token strings are not returned)"),
    Unsupported("continue_final_message", False, " (only false)"),
    Unsupported("chat_template", hint=" (the server's template is used)"),
    Unsupported("documents", []),
    Unsupported("mm_processor_kwargs", {}),
))
# A text prompt renders no tools.
_TEXT_UNSUPPORTED = TOKENIZE_UNSUPPORTED.extended(
    Unsupported("tools", [], " with a 'prompt' (tools are rendered with 'messages')"),
    Unsupported("tool_choice", hint=" with a 'prompt' (tools are rendered with 'messages')"))
_MODEL = ModelName("The served model; any other name: 404.")


@dataclass(frozen=True, slots=True)
class TokenizeRequest:
    model: str | None
    prompt: str | None  # exactly one of prompt and messages
    messages: list[dict] | None
    add_special_tokens: bool
    add_generation_prompt: bool = True
    chat_template_kwargs: dict = field(default_factory=dict)
    tools: ToolRequest | None = None  # None: no tools (absent, empty)


@dataclass(frozen=True, slots=True)
class DetokenizeRequest:
    model: str | None
    tokens: list[int]


@dataclass(frozen=True)
class NotBoth(Field):
    """`prompt` and `messages` are two shapes: refused together (the shapes' schemas say it with null)."""

    key: str = "<prompt or messages>"

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> None:
        if obj.get("prompt") is not None and obj.get("messages") is not None:
            raise bad_request("Give either 'prompt' or 'messages', not both.", "prompt")

    def properties(self, ctx: Context) -> dict[str, Schema]:
        return {}


@dataclass(frozen=True)
class Absent(Field):
    """The other shape's field: null or absent here."""

    key: str
    absent = None

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> None:
        return None

    def schema(self, ctx: Context) -> Schema:
        return dict(NULL_ONLY)


@dataclass(frozen=True)
class Text(Field):
    key: str = "prompt"
    required: bool = True

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> str:
        prompt, limit = obj.get(self.key), ctx.limits.max_prompt_chars
        if prompt is None:
            raise bad_request("'prompt' (a text) or 'messages' (a chat) is required.", "prompt")
        if type(prompt) is not str:
            raise type_error("prompt", "a string", prompt)
        if len(prompt) > limit:
            raise bad_request(f"'prompt' is too long: {len(prompt)} characters, the limit is {limit} "
                              "(--max-prompt-chars).", "prompt")
        return prompt

    def schema(self, ctx: Context) -> Schema:
        return {"type": "string", "maxLength": ctx.limits.max_prompt_chars}


@dataclass(frozen=True)
class Tokens(Field):
    key: str = "tokens"
    required: bool = True

    def parse(self, obj: dict, ctx: Context, seen: Seen) -> list[int]:
        tokens, limit, flag = obj.get(self.key), *_max_tokens(ctx.limits)
        if tokens is None:
            raise bad_request("'tokens' is required.", "tokens")
        if type(tokens) is list and len(tokens) > limit:  # the bound of a prompt's ids, and of the reply
            raise bad_request(f"'tokens' is too long: {len(tokens)} token ids, the limit is {limit} ({flag}).",
                              "tokens")
        return check_token_ids("tokens", tokens, ctx.vocab_size, allow_empty=True)

    def schema(self, ctx: Context) -> Schema:
        return {"type": "array", "items": token_id(ctx.vocab_size), "maxItems": _max_tokens(ctx.limits)[0]}


def _max_tokens(limits: IngressLimits) -> tuple[int, str]:
    """The ids /detokenize takes, and the flag that sets that bound."""
    if limits.max_detokenize_tokens <= limits.max_prompt_chars:
        return limits.max_detokenize_tokens, "--max-detokenize-tokens"
    return limits.max_prompt_chars, "--max-prompt-chars"


TEXT_SHAPE = RequestSpec((
    _MODEL, _TEXT_UNSUPPORTED, NotBoth(), Text(), Absent("messages"),
    Bool("add_special_tokens", True, "Add the model's special tokens (BOS). Default true."),
), lambda seen: TokenizeRequest(seen["model"], seen["prompt"], None, seen["add_special_tokens"]),
    allow_unknown=False)

CHAT_SHAPE = RequestSpec((
    _MODEL, TOKENIZE_UNSUPPORTED, NotBoth(), Messages(), Absent("prompt"),
    Bool("add_special_tokens", False, "Add special tokens besides the template's. Default false."),
    Bool("add_generation_prompt", True, "As on chat completions. Default true."),
    TemplateKwargs(), *tool_fields(),
), lambda seen: TokenizeRequest(seen["model"], None, seen["messages"], seen["add_special_tokens"],
                                seen["add_generation_prompt"], seen["chat_template_kwargs"], seen["tools"]),
    allow_unknown=False)

DETOKENIZE = RequestSpec((_MODEL, Tokens()), lambda seen: DetokenizeRequest(seen["model"], seen["tokens"]),
                         allow_unknown=False)


def parse_tokenize_request(obj: dict, limits: IngressLimits) -> TokenizeRequest:
    shape = CHAT_SHAPE if obj.get("messages") is not None else TEXT_SHAPE
    return shape.parse(obj, limits, None)


def tokenize_schema(ctx: Context) -> Schema:
    return {"oneOf": [TEXT_SHAPE.schema(ctx), CHAT_SHAPE.schema(ctx)],
            "description": "A text (`prompt`) or a chat (`messages`), not both."}


def parse_detokenize_request(obj: dict, limits: IngressLimits, vocab_size: int) -> DetokenizeRequest:
    return DETOKENIZE.parse(obj, limits, vocab_size)
