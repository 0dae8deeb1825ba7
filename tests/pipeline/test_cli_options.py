"""`ttft serve`'s flags come from EngineConfig / IngressLimits / ServeOptions: all of them, with their
defaults in the parser and the help, and `config_from_args` gives back what was passed."""
from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from protocol.limits import IngressLimits
from pipeline.cli import ServeOptions, add_serve_arguments, config_from_args
from pipeline.config import EngineConfig
from scheduler.config import SchedulerConfig
from stages.options import OPTION, default_of, from_args

# Every flag `ttft serve` had before the flags were derived from the fields (names must not change),
# and those added since (--tensor-parallel-size, -tp: issue 24).
FLAGS = """--model --served-model-name --seed --host --port --uds --device --dtype --max-model-len --kv-cache-gb
--num-kv-blocks --block-size --gpu-memory-utilization --attention-backend --enforce-eager --tensor-parallel-size -tp
--mixed-graph-max-tokens
--max-num-seqs --max-num-batched-tokens --max-queued --long-prefill-threshold --prefill-step-tokens
--prefill-backlog-steps --enable-chunked-prefill --no-enable-chunked-prefill --scheduler-policy --async-scheduling
--no-async-scheduling --enable-prefix-caching --no-enable-prefix-caching --no-shadow --kv-host-gb --kv-disk-path
--kv-disk-gb --kv-offload-early --no-kv-offload-early --request-timeout-s --stream-stall-timeout-s
--shutdown-grace-s --body-read-timeout-s --max-connections --max-n --max-body-bytes --max-prompt-chars
--max-tokens-cap --max-stop-strings --cpu-threads --cpu-decode-kernel --api-key --protect-metrics --profile-dir --log-level""".split()
# Flags added since, one issue each.
FLAGS += ["--kv-cache-dtype"]  # issue 23
FLAGS += ["--max-logprobs"]  # issue 27 (logits)
FLAGS += ["--max-batch-prompts", "--chat-template", "--ssl-keyfile", "--ssl-certfile", "--ssl-ca-certs",
          "--ssl-cert-reqs"]  # issue 27
FLAGS += ["--speculative-config"]  # issue 26
FLAGS += ["--long-context-attention", "--context-aware-chunks", "--no-context-aware-chunks"]  # issue 22
FLAGS += ["--uds-mode", "--uds-group", "--access-log", "--no-access-log", "--log-stats-interval-s"]  # issue 41
FLAGS += ["--header-read-timeout-s", "--keep-alive-timeout-s", "--max-headers", "--max-header-bytes",
          "--max-url-bytes"]  # issue 42
FLAGS += ["--max-detokenize-tokens"]  # issue 42 (token routes)
FLAGS += ["--grammar-compile-timeout-s", "--max-grammar-chars"]  # issue 44 (structured outputs)
FLAGS += ["--concurrent-lanes", "--no-concurrent-lanes", "--step-budget-ms"]  # issue 43
FLAGS += ["--tool-call-parser", "--reasoning-parser", "--enable-auto-tool-choice", "--max-tools"]  # issue 44 (tools)
FLAGS += ["--otlp-traces-endpoint"]  # issue 45
FLAGS += ["--data-parallel-size", "-dp"]  # issue 48
FLAGS += ["--skinny-gemm"]  # issue 46
FLAGS += ["--step-decode-ratio"]  # issue 47
FLAGS += ["--no-cpu-decode-kernel"]  # issue 47 (the CPU's C++ kernels on by default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ttft serve")
    add_serve_arguments(p)
    return p


def option_fields(cls: type) -> list:
    return [f for f in fields(cls) if OPTION in f.metadata]


ALL_OPTIONS = option_fields(EngineConfig) + option_fields(IngressLimits) + option_fields(ServeOptions)


def test_every_flag_of_before_is_there_and_no_other() -> None:
    strings = [s for a in parser()._actions for s in a.option_strings if s not in ("-h", "--help")]
    assert sorted(strings) == sorted(FLAGS)


def test_every_option_field_is_a_flag_with_its_default_in_parser_and_help() -> None:
    actions = {a.dest: a for a in parser()._actions}
    help_text = " ".join(parser().format_help().split())  # unwrapped
    for f in ALL_OPTIONS:
        action, default = actions[f.name], default_of(f)
        assert action.default == default, f.name
        assert action.option_strings[0] in help_text
        if default is not None and f.metadata[OPTION].action is None and "default" not in (action.help or ""):
            assert f"(default: {default})" in help_text or f"default: {default}" in help_text, f.name
        if f.metadata[OPTION].choices:
            assert "{" + ",".join(f.metadata[OPTION].choices) + "}" in help_text
    assert {f.name for f in ALL_OPTIONS} == {a.dest for a in parser()._actions} - {"help"}


def test_the_help_keeps_the_device_dependent_defaults_said() -> None:
    help_text = " ".join(parser().format_help().split())
    assert "per-step token budget (default 1024 on CPU, 8192 on a GPU)" in help_text
    assert "(default: half the step budget on a GPU, a quarter on CPU)" in help_text and "(default: on a GPU)" in help_text


def other_value(f, default):
    """A value unlike the default, and the argv that sets it."""
    opt = f.metadata[OPTION]
    flag = opt.flag or "--" + f.name.replace("_", "-")
    if opt.action == "store_true":
        return True, [flag]
    if opt.action == "store_false":
        return False, [flag]
    if isinstance(default, bool) or f.type in ("bool", "bool | None"):
        return (False, [f"--no-{f.name.replace('_', '-')}"]) if default is not False else (True, [flag])
    if opt.choices:
        value = next(c for c in opt.choices if c != default)
    elif "float" in f.type:
        value = (default or 1.0) + 0.5
    elif "int" in f.type:
        value = (default or 1) + 3
    else:
        value = f"/tmp/{f.name}"
    return value, [flag, str(value)]


def test_config_from_args_round_trips_non_default_values_of_every_option() -> None:
    assert config_from_args(parser().parse_args([])) == EngineConfig()
    assert from_args(ServeOptions, parser().parse_args([])) == ServeOptions()
    argv: list[str] = []
    expected: dict[type, dict] = {EngineConfig: {}, IngressLimits: {}, ServeOptions: {}}
    for cls, values in expected.items():
        for f in option_fields(cls):
            value, args = other_value(f, default_of(f))
            assert value != default_of(f), f.name
            values[f.name], argv = value, argv + args
    parsed = parser().parse_args(argv)
    assert config_from_args(parsed) == EngineConfig(**expected[EngineConfig],
                                                    limits=IngressLimits(**expected[IngressLimits]))
    assert from_args(ServeOptions, parsed) == ServeOptions(**expected[ServeOptions])
    assert parsed.shadow is False and parsed.enforce_eager is True and parsed.enable_prefix_caching is False


@pytest.mark.parametrize("argv,field,value", [
    (["--long-prefill-threshold", "300"], "long_prefill_threshold", 300),
    (["--no-shadow"], "shadow", False),
    (["--scheduler-policy", "fcfs"], "scheduler_policy", "fcfs"),
    (["--no-enable-chunked-prefill"], "enable_chunked_prefill", False),
])
def test_a_spelled_out_flag_sets_its_field(argv: list[str], field: str, value: object) -> None:
    assert getattr(config_from_args(parser().parse_args(argv)), field) == value


def test_the_engine_options_reach_the_scheduler_by_name() -> None:
    from pipeline.build import build_model

    cfg = EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, block_size=8, max_num_seqs=5,
                       max_num_batched_tokens=300, max_queued=7, long_prefill_threshold=100,
                       prefill_step_tokens=50, prefill_backlog_steps=2, enable_chunked_prefill=False,
                       scheduler_policy="fcfs", async_scheduling=False, enable_prefix_caching=False, shadow=False)
    sched = build_model(cfg).scheduler.config
    assert sched == SchedulerConfig(
        num_blocks=64, block_size=8, max_num_seqs=5, max_num_batched_tokens=300, max_model_len=256,
        max_queued=7, long_prefill_threshold=100, prefill_step_tokens=50, prefill_backlog_steps=2,
        eos_token_ids=sched.eos_token_ids, policy="fcfs", enable_prefix_caching=False, shadow=False,
        chunked_prefill=False, async_scheduling=False)
    assert sched.eos_token_ids
