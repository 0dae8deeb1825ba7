"""Chat templates: a model's Jinja template rendered the way transformers renders it.

Templates come from model files, so they are untrusted code: they run in Jinja's immutable
sandbox, and unlike the stock sandbox (which quietly renders a blocked attribute as empty text)
any reach for internals such as `''.__class__` raises, so a hostile template fails loudly.
Every failure, at compile or render time, surfaces as a ValueError the caller answers with a 400.
`--chat-template` (vLLM's flag) replaces the model's template with a file's, or with the template
itself written on the command line; it runs in the same sandbox.
"""
from __future__ import annotations

import codecs
import json
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# ChatML, used when a model ships no template (SmolLM2 and Qwen use this shape).
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# What a template has and a file path does not (vLLM's test): a value without any of these that
# cannot be read is a mistyped path, not a template.
_TEMPLATE_CHARS = "{}\n"


def load_chat_template(value: str) -> str:
    """The template source `--chat-template` names: the file's text, or (as vLLM reads it) the value
    itself when it is no readable file but looks like a template, its escapes (\\n) decoded.
    Raises ValueError for an unreadable path or a template that does not compile."""
    try:
        with open(value, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        if not any(c in value for c in _TEMPLATE_CHARS):
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f"--chat-template {value!r} looks like a file path, but it cannot be read: "
                             f"{reason}") from None
        source = codecs.decode(value, "unicode_escape")
    if not source.strip():
        raise ValueError(f"--chat-template {value!r} is empty")
    try:
        ChatTemplate(source)  # compiled now: a syntax error refuses to start, it does not wait for a request
    except ValueError as exc:
        raise ValueError(f"--chat-template {value!r}: {exc}") from None
    return source


class _StrictSandbox(ImmutableSandboxedEnvironment):
    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(f"chat template may not access attribute {attribute!r} of {type(obj).__name__}")


class _Namespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore names, so no dunder can be planted on it."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # same signature trick as jinja's Namespace
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"chat template may not set {name!r} on a namespace")


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # transformers overrides jinja's tojson (which HTML-escapes); templates expect this one.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = _StrictSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, namespace=_Namespace)
    return env


class ChatTemplate:
    def __init__(self, template: str | None, bos_token: str | None = None, eos_token: str | None = None) -> None:
        self.source = template if template else DEFAULT_CHAT_TEMPLATE
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""
        try:
            self._template = _environment().from_string(self.source)
        except TemplateError as e:
            line = getattr(e, "lineno", None)
            raise ValueError(f"invalid chat template: {e}" + (f" (line {line})" if line else "")) from e

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages` (dicts with role/content...). `extra` reaches the template
        as variables (e.g. tools=None); bos/eos tokens are provided as transformers does."""
        context = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                   "messages": messages, "add_generation_prompt": add_generation_prompt}
        try:
            return self._template.render(**context)
        except TemplateError as e:
            raise ValueError(f"chat template error: {e}") from e
        except Exception as e:  # a template bug (TypeError, KeyError, ...) is still the template's fault
            raise ValueError(f"chat template error: {type(e).__name__}: {e}") from e
