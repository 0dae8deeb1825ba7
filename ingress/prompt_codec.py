"""PromptCodec: the tokenizer and the chat template applied to what a request carries.

Plain text gets the model's special tokens (its BOS rule) unless the request says otherwise; a chat
is rendered by the template, which writes its own special tokens, so they are never added twice, and
only the template writes them: a special token's text in a message is tokenized as text
(special_guard.py), and so is one in a tool's definition. Tools reach the template as `tools=`,
as transformers passes them, or, for a template that ignores them, as a system message
(tool_prompt.py).
Each method takes one argument so that the ingress stage can hand it to its pool as it is.
"""
from __future__ import annotations

from ingress.chat_template import ChatTemplate
from ingress.special_guard import SpecialTokenGuard
from ingress.tokenizer import Tokenizer
from ingress.tool_prompt import renders_tools, with_generic_tools
from protocol.errors import bad_request
from protocol.requests.chat import ChatCompletionRequest
from protocol.requests.tokenize import TokenizeRequest
from protocol.tool_calls.forced import NamedCallParser, RequiredCallsParser
from protocol.tool_calls.parser import ToolCallParser


class PromptCodec:
    def __init__(self, tokenizer: Tokenizer, chat_template: ChatTemplate,
                 tool_format: type[ToolCallParser] | None = None) -> None:
        """`tool_format`: the --tool-call-parser's format, which a template that ignores tools is
        told to write calls in."""
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.guard = SpecialTokenGuard(tokenizer.special_tokens, chat_template.source)
        self.renders_tools = renders_tools(chat_template)
        self.tool_format = tool_format

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=True)

    def encode_texts(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer.encode(text, add_special_tokens=True) for text in texts]

    def encode_chat(self, req: ChatCompletionRequest) -> list[int]:
        return self._encode_chat(req, add_special_tokens=False)  # the template wrote them

    def chat_inputs(self, req: ChatCompletionRequest | TokenizeRequest) -> tuple[list[dict], dict]:
        """The messages and template variables a chat renders from (unescaped)."""
        tools = req.tools
        if self.renders_tools:
            if tools is None:
                return req.messages, req.chat_template_kwargs
            return req.messages, {**req.chat_template_kwargs, "tools": tools.template_tools()}
        if tools is None and not any("tool_calls" in m for m in req.messages):
            return req.messages, req.chat_template_kwargs
        call_format = self.tool_format
        if tools is not None and tools.choice == "required":
            call_format = RequiredCallsParser
        elif tools is not None and tools.choice == "function":
            call_format = NamedCallParser
        return with_generic_tools(req.messages, tools, call_format, self.tool_format), req.chat_template_kwargs

    def encode_tokenize_chat(self, req: TokenizeRequest) -> list[int]:
        """/tokenize's chat, tools rendered as chat completions renders them: the template's special
        tokens, and the model's too when asked."""
        return self._encode_chat(req, add_special_tokens=req.add_special_tokens)

    def _encode_chat(self, req: ChatCompletionRequest | TokenizeRequest, add_special_tokens: bool) -> list[int]:
        guard = self.guard
        messages, kwargs = self.chat_inputs(req)
        text = self.render(guard.escape(messages), req.add_generation_prompt, guard.escape(kwargs))
        return guard.encode(self.tokenizer, text, add_special_tokens=add_special_tokens)

    def encode_plain(self, req: TokenizeRequest) -> list[int]:
        return self.tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        """The ids' text, special tokens included (as vLLM decodes them)."""
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def decode_all(self, prompts: list[list[int]]) -> list[str]:
        return [self.decode(ids) for ids in prompts]

    def render(self, messages: list[dict], add_generation_prompt: bool, kwargs: dict) -> str:
        """The chat template's text; a template that fails on these messages is the client's 400
        with the template's own message (raise_exception's text, or the Jinja error)."""
        try:
            return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **kwargs)
        except ValueError as exc:
            raise bad_request(f"messages could not be rendered by the chat template: {exc}", "messages") from None


def content_chars(messages: list[dict]) -> int:
    """The characters of the messages' contents: what decides where they are tokenized."""
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return total
