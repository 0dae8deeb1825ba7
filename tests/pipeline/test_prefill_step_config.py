"""How the lanes' per-step prefill cap resolves: 768 on a GPU budget, 256 on CPU (with a 1,024-token budget and a 256-token fast lane), and the flag."""
from __future__ import annotations

import argparse

from pipeline.cli import add_serve_arguments, config_from_args
from pipeline.config import EngineConfig
from scheduler.config import SchedulerConfig


def test_the_cap_resolves_by_device() -> None:
    gpu = EngineConfig(device="cuda")
    gpu.resolve_budgets()
    assert (gpu.max_num_batched_tokens, gpu.long_prefill_threshold, gpu.prefill_step_tokens) == (8192, 4096, 768)
    cpu = EngineConfig(device="cpu")
    cpu.resolve_budgets()
    assert (cpu.max_num_batched_tokens, cpu.long_prefill_threshold, cpu.prefill_step_tokens) == (1024, 256, 256)
    assert SchedulerConfig(num_blocks=8, max_num_batched_tokens=512, prefill_step_tokens=128).prefill_step_cap == 128
    assert SchedulerConfig(num_blocks=8, max_num_batched_tokens=512, prefill_step_tokens=0).prefill_step_cap is None
    given = EngineConfig(device="cpu", max_num_batched_tokens=512)  # the CPU's fast lane: a quarter of any budget
    given.resolve_budgets()
    assert given.long_prefill_threshold == 128
    small = EngineConfig(device="cuda", max_num_batched_tokens=512)  # a cap at or above the budget is none
    small.resolve_budgets()
    assert SchedulerConfig(num_blocks=8, max_num_batched_tokens=512,
                           prefill_step_tokens=small.prefill_step_tokens).prefill_step_cap is None


def test_the_flag_sets_it() -> None:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    assert config_from_args(p.parse_args([])).prefill_step_tokens is None
    assert config_from_args(p.parse_args(["--prefill-step-tokens", "1024"])).prefill_step_tokens == 1024
    args = p.parse_args(["--prefill-backlog-steps", "0"])
    assert config_from_args(args).prefill_backlog_steps == 0
    assert config_from_args(p.parse_args([])).prefill_backlog_steps == 4


def test_the_backlog_setting_reaches_the_scheduler() -> None:
    from pipeline.build import build_model

    built = build_model(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, prefill_backlog_steps=2))
    assert built.scheduler.config.prefill_backlog_steps == 2
