"""The ranges of `ttft serve`'s flags, checked on the parsed arguments before anything starts.

Each rule names a flag (by its argparse `dest`, the config field's name) and what its value must
be; the first value outside its rule is a `UsageError` whose message is one line naming the flag,
its value and the rule (`--port 99999: must be a TCP port, 1-65535 (0: any free port)`). They run
before the configs are built from the arguments, so a value a config's own check would refuse
(`IngressLimits`, `SchedulerConfig`) is reported by its flag, never by an internal class name.
What needs the model or the device is checked next, in pipeline/model_checks.py.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

# Tokens per KV block the attention paths are built and tested for: powers of two, as vLLM's.
SUPPORTED_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


class UsageError(ValueError):
    """A flag's value that cannot work: `ttft serve` prints it on one line and exits 2."""


class StartupError(Exception):
    """A configuration that cannot work, found while the engine is built (pipeline/build.py): the
    server refuses to start with this message. Defined here, beside UsageError, so that `ttft serve`
    can catch it without importing the build (and torch) before its checks."""


@dataclass(frozen=True)
class Rule:
    dest: str
    ok: Callable[[Any], bool]
    requirement: str


def at_least(n: float) -> Callable[[Any], bool]:
    return lambda v: v >= n


def positive(v: float) -> bool:
    return v > 0


def octal_mode(text: str) -> int | None:
    """`--uds-mode`'s value as permission bits (0600 -> 0o600), or None when it is not one."""
    try:
        mode = int(text, 8)
    except (TypeError, ValueError):
        return None
    return mode if 0 <= mode <= 0o777 else None


RULES = (
    # server
    Rule("port", lambda v: 0 <= v <= 65535, "must be a TCP port, 1-65535 (0: any free port)"),
    Rule("host", lambda v: bool(v.strip()), "must be a host name or an address"),
    Rule("uds", lambda v: bool(v) and "\0" not in v, "must be a file path"),
    Rule("uds_mode", lambda v: octal_mode(v) is not None, "must be octal permission bits, e.g. 0600 or 0660"),
    Rule("log_level", lambda v: v.lower() in LOG_LEVELS, f"must be one of {', '.join(LOG_LEVELS)}"),
    Rule("log_stats_interval_s", at_least(0), "must be >= 0 (0: no stats lines)"),
    Rule("data_parallel_size", at_least(1), "must be >= 1"),
    # engine
    Rule("seed", at_least(0), "must be >= 0"),
    Rule("max_model_len", at_least(1), "must be >= 1"),
    Rule("kv_cache_gb", positive, "must be > 0"),
    Rule("num_kv_blocks", at_least(2), "must be >= 2 (block 0 is reserved)"),
    Rule("block_size", lambda v: v in SUPPORTED_BLOCK_SIZES,
         f"must be one of {', '.join(map(str, SUPPORTED_BLOCK_SIZES))} (the sizes the attention kernels support)"),
    Rule("gpu_memory_utilization", lambda v: 0 < v <= 1, "must be a fraction in (0, 1]"),
    Rule("tensor_parallel_size", at_least(1), "must be >= 1"),
    Rule("mixed_graph_max_tokens", at_least(0), "must be >= 0 (0: no mixed-step graphs)"),
    Rule("max_num_seqs", at_least(1), "must be >= 1"),
    Rule("max_num_batched_tokens", at_least(1), "must be >= 1"),
    Rule("max_queued", at_least(0), "must be >= 0"),
    Rule("long_prefill_threshold", at_least(0), "must be >= 0"),
    Rule("prefill_step_tokens", at_least(0), "must be >= 0 (0: no cap)"),
    Rule("prefill_backlog_steps", at_least(0), "must be >= 0 (0: never)"),
    Rule("step_budget_ms", positive, "must be > 0 (--no-concurrent-lanes: no budget)"),
    Rule("step_decode_ratio", lambda v: v == 0 or v > 1, "must be 0 (off) or > 1"),
    Rule("kv_host_gb", at_least(0), "must be >= 0 (0: no host tier)"),
    Rule("kv_disk_path", lambda v: bool(v.strip()), "must be a directory path"),
    Rule("kv_disk_gb", positive, "must be > 0"),
    Rule("request_timeout_s", positive, "must be > 0"),
    Rule("body_read_timeout_s", positive, "must be > 0"),
    Rule("max_connections", at_least(1), "must be >= 1"),
    Rule("header_read_timeout_s", positive, "must be > 0"),
    Rule("keep_alive_timeout_s", positive, "must be > 0"),
    Rule("max_headers", at_least(1), "must be >= 1"),
    Rule("max_header_bytes", at_least(1), "must be >= 1"),
    Rule("max_url_bytes", at_least(1), "must be >= 1"),
    Rule("stream_stall_timeout_s", positive, "must be > 0"),
    Rule("shutdown_grace_s", at_least(0), "must be >= 0 (0: abort at once)"),
    Rule("cpu_threads", at_least(1), "must be >= 1"),
    Rule("grammar_compile_timeout_s", positive, "must be > 0"),
    # request limits (IngressLimits)
    Rule("max_body_bytes", at_least(1), "must be >= 1"),
    Rule("max_prompt_chars", at_least(1), "must be >= 1"),
    Rule("max_tokens_cap", at_least(1), "must be >= 1"),
    Rule("max_n", at_least(1), "must be >= 1"),
    Rule("max_batch_prompts", at_least(1), "must be >= 1"),
    Rule("max_stop_strings", at_least(0), "must be >= 0"),
    Rule("max_logprobs", at_least(0), "must be >= 0"),
    Rule("max_detokenize_tokens", at_least(1), "must be >= 1"),
    Rule("max_tools", at_least(0), "must be >= 0 (0: no tools)"),
    Rule("max_grammar_chars", at_least(1), "must be >= 1"),
)


def flag_names(parser: argparse.ArgumentParser) -> dict[str, str]:
    """dest -> the flag's first spelling, for every option of `parser`."""
    return {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}


def check_flag_ranges(args: argparse.Namespace, flags: dict[str, str]) -> None:
    """Raise UsageError for the first value outside its rule (a flag left unset is not checked)."""
    for rule in RULES:
        value = getattr(args, rule.dest, None)
        if value is not None and not rule.ok(value):
            raise UsageError(f"{flags.get(rule.dest, rule.dest)} {value}: {rule.requirement}")
    if getattr(args, "enable_auto_tool_choice", False) and getattr(args, "tool_call_parser", None) is None:
        raise UsageError(f"{flags.get('enable_auto_tool_choice', '--enable-auto-tool-choice')} needs "
                         f"{flags.get('tool_call_parser', '--tool-call-parser')} (the format the model writes "
                         "tool calls in)")
    both = [d for d in ("kv_host_gb", "kv_disk_path") if getattr(args, d, None)]
    if both and getattr(args, "enable_prefix_caching", True) is False:
        raise UsageError(f"{flags.get(both[0], both[0])}: the KV tiers hold prefix-cache blocks, "
                         "so they need --enable-prefix-caching")
