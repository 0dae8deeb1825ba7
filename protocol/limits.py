"""IngressLimits: the request-size and value limits checked before any expensive work.

The defaults are generous for interactive use and small enough that one request cannot stall the
event loop or fill memory. The `option()` fields are `ttft serve` flags (EngineConfig.limits).
"""
from __future__ import annotations

from dataclasses import dataclass

from stages.options import option


@dataclass(frozen=True, slots=True)
class IngressLimits:
    # Checked on the raw bytes, before orjson runs.
    max_body_bytes: int = option(8 * 1024 * 1024, "bytes of a request body; past it: 413")
    # Checked before tokenizing: a 10 MB prompt is refused in microseconds.
    max_prompt_chars: int = option(1_000_000, "characters of prompt text (completions: of all the prompts of "
                                              "a batch together) or of all message contents together (chat); "
                                              "past it: 400")
    max_tokens_cap: int | None = option(None, "an explicit max_tokens above this is a 400 (default: only the "
                                              "context window limits it)")
    max_n: int = option(16, "parallel samples (choices) per request: `n` above it is a 400")
    # Each prompt of a batch is a request of its own (with its n choices): admitted all or none.
    max_batch_prompts: int = option(256, "prompts in one /v1/completions request (a batch); past it: 400")
    max_stop_strings: int = option(16, "stop strings per request; past it: 400")
    max_stop_string_chars: int = 1000
    max_stop_token_ids: int = 256
    # OpenAI's own bound. Higher temperatures only flatten the distribution into noise.
    max_temperature: float = 2.0
    # Alternatives per position: completions `logprobs`, chat `top_logprobs` (OpenAI allows 20 on
    # chat), `prompt_logprobs`. vLLM's flag and default.
    max_logprobs: int = option(20, "logprobs, top_logprobs and prompt_logprobs above this are a 400")
    # /detokenize's output is up to a token's longest text per id (81 bytes on SmolLM2): this bounds
    # what one request costs in decode time and reply size; --max-prompt-chars bounds it too.
    max_detokenize_tokens: int = option(131072, "token ids in one /detokenize request; past it: 400")
    # Tools of one chat request: each is rendered into the prompt and, for `required`, into a grammar.
    max_tools: int = option(128, "tools in one chat request; past it: 400")
    # vLLM's flag: a model's own tool calls are parsed only when the server is started for it
    # (tool_choice "auto", the default with tools, is a 400 otherwise).
    enable_auto_tool_choice: bool = option(False, "parse the tool calls a model writes (tool_choice \"auto\"); "
                                                  "needs --tool-call-parser", action="store_true")
    max_logit_bias: int = 1024  # logit_bias entries: the sampler scatters each one every step
    max_messages: int = 4096

    def __post_init__(self) -> None:
        if self.max_n < 1:
            raise ValueError(f"max_n must be at least 1, got {self.max_n}")
        if self.max_logprobs < 0:
            raise ValueError(f"max_logprobs must be at least 0, got {self.max_logprobs}")
        if self.max_detokenize_tokens < 1:
            raise ValueError(f"max_detokenize_tokens must be at least 1, got {self.max_detokenize_tokens}")
        if self.max_tools < 0:
            raise ValueError(f"max_tools must be at least 0, got {self.max_tools}")
        if self.max_batch_prompts < 1:
            raise ValueError(f"max_batch_prompts must be at least 1, got {self.max_batch_prompts}")
