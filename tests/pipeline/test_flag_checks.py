"""The flags' ranges: every rule refuses its bad value with one line naming the flag, the defaults
pass, and every rule has a case here (a new rule needs one)."""
from __future__ import annotations

import argparse

import pytest

from pipeline.cli import add_serve_arguments
from pipeline.flag_checks import RULES, SUPPORTED_BLOCK_SIZES, UsageError, check_flag_ranges, flag_names, octal_mode

# dest -> (a value its rule refuses, the flag the message names)
BAD = {
    "port": (70000, "--port"), "host": ("  ", "--host"), "uds": ("", "--uds"), "uds_mode": ("0800", "--uds-mode"),
    "log_level": ("loud", "--log-level"), "log_stats_interval_s": (-1.0, "--log-stats-interval-s"),
    "seed": (-1, "--seed"), "max_model_len": (0, "--max-model-len"), "kv_cache_gb": (0.0, "--kv-cache-gb"),
    "num_kv_blocks": (1, "--num-kv-blocks"), "block_size": (24, "--block-size"),
    "gpu_memory_utilization": (1.01, "--gpu-memory-utilization"),
    "tensor_parallel_size": (0, "--tensor-parallel-size"), "mixed_graph_max_tokens": (-1, "--mixed-graph-max-tokens"),
    "max_num_seqs": (0, "--max-num-seqs"), "max_num_batched_tokens": (0, "--max-num-batched-tokens"),
    "max_queued": (-1, "--max-queued"), "long_prefill_threshold": (-1, "--long-prefill-threshold"),
    "prefill_step_tokens": (-1, "--prefill-step-tokens"), "prefill_backlog_steps": (-1, "--prefill-backlog-steps"),
    "step_budget_ms": (0.0, "--step-budget-ms"), "step_decode_ratio": (1.0, "--step-decode-ratio"),
    "kv_host_gb": (-0.5, "--kv-host-gb"), "kv_disk_path": (" ", "--kv-disk-path"), "kv_disk_gb": (0.0, "--kv-disk-gb"),
    "request_timeout_s": (0.0, "--request-timeout-s"), "body_read_timeout_s": (-1.0, "--body-read-timeout-s"),
    "max_connections": (0, "--max-connections"), "stream_stall_timeout_s": (0.0, "--stream-stall-timeout-s"),
    "shutdown_grace_s": (-1.0, "--shutdown-grace-s"), "cpu_threads": (0, "--cpu-threads"),
    "max_body_bytes": (0, "--max-body-bytes"), "max_prompt_chars": (0, "--max-prompt-chars"),
    "max_tokens_cap": (0, "--max-tokens-cap"), "max_n": (0, "--max-n"), "max_batch_prompts": (0, "--max-batch-prompts"),
    "max_stop_strings": (-1, "--max-stop-strings"), "max_logprobs": (-1, "--max-logprobs"),
    "header_read_timeout_s": (0.0, "--header-read-timeout-s"), "keep_alive_timeout_s": (-1.0, "--keep-alive-timeout-s"),
    "max_headers": (0, "--max-headers"), "max_header_bytes": (0, "--max-header-bytes"),
    "max_url_bytes": (0, "--max-url-bytes"),
    "max_detokenize_tokens": (0, "--max-detokenize-tokens"),
    "max_tools": (-1, "--max-tools"),
    "grammar_compile_timeout_s": (0.0, "--grammar-compile-timeout-s"), "max_grammar_chars": (0, "--max-grammar-chars"),
    "data_parallel_size": (0, "--data-parallel-size"),
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ttft serve")
    add_serve_arguments(p)
    return p


def defaults() -> argparse.Namespace:
    return parser().parse_args([])


def test_every_rule_has_a_bad_case_and_names_a_real_flag():
    assert {rule.dest for rule in RULES} == set(BAD)
    flags = flag_names(parser())
    assert {dest: flags[dest] for dest in BAD} == {dest: flag for dest, (_, flag) in BAD.items()}


def test_the_defaults_pass():
    check_flag_ranges(defaults(), flag_names(parser()))


@pytest.mark.parametrize("dest", sorted(BAD))
def test_a_bad_value_is_one_line_naming_its_flag(dest):
    value, flag = BAD[dest]
    args = defaults()
    setattr(args, dest, value)
    with pytest.raises(UsageError) as info:
        check_flag_ranges(args, flag_names(parser()))
    message = str(info.value)
    assert message.startswith(f"{flag} {value}: ") and "\n" not in message


def test_edges_of_the_ranges():
    flags = flag_names(parser())
    for dest, good in (("port", 1), ("port", 65535), ("port", 0), ("gpu_memory_utilization", 1.0),
                       ("gpu_memory_utilization", 0.01), ("shutdown_grace_s", 0.0), ("log_level", "DEBUG"),
                       ("step_decode_ratio", 0.0), ("step_decode_ratio", 1.01)):
        args = defaults()
        setattr(args, dest, good)
        check_flag_ranges(args, flags)
    for size in SUPPORTED_BLOCK_SIZES:
        args = defaults()
        args.block_size = size
        check_flag_ranges(args, flags)
    args = defaults()
    args.gpu_memory_utilization = 0.0
    with pytest.raises(UsageError, match=r"^--gpu-memory-utilization 0.0: must be a fraction in \(0, 1\]$"):
        check_flag_ranges(args, flags)


def test_kv_tiers_need_the_prefix_cache():
    args = defaults()
    args.kv_host_gb, args.enable_prefix_caching = 1.0, False
    with pytest.raises(UsageError, match="^--kv-host-gb: the KV tiers hold prefix-cache blocks"):
        check_flag_ranges(args, flag_names(parser()))


def test_octal_mode():
    assert octal_mode("0600") == 0o600 and octal_mode("660") == 0o660 and octal_mode("0") == 0
    assert octal_mode("0800") is None and octal_mode("1777") is None and octal_mode("rw") is None


def test_auto_tool_choice_needs_a_tool_call_parser():
    args = parser().parse_args(["--enable-auto-tool-choice"])
    with pytest.raises(UsageError, match="^--enable-auto-tool-choice needs --tool-call-parser"):
        check_flag_ranges(args, flag_names(parser()))
    check_flag_ranges(parser().parse_args(["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]),
                      flag_names(parser()))


@pytest.mark.parametrize("argv", [["--tool-call-parser", "granite"], ["--reasoning-parser", "o1"]])
def test_unknown_parsers_exit_2_naming_the_choices(argv, capsys):
    with pytest.raises(SystemExit) as info:
        parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert argv[0] in err and "invalid choice" in err
    assert ("hermes" in err) if argv[0] == "--tool-call-parser" else ("deepseek_r1" in err and "qwen3" in err)
