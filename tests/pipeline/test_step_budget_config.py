"""How the concurrent lanes' step budget resolves: on by default on CPU (off on a GPU until measured), 15 ms on a GPU, the CPU default on
CPU, each device's cost seed; the flags reach the scheduler, --no-concurrent-lanes turns it off."""
from __future__ import annotations

import argparse

from pipeline.cli import add_serve_arguments, config_from_args
import pytest

from pipeline.config import CPU_STEP_BUDGET_MS, EngineConfig
from scheduler.step_budget import StepBudgetConfig, StepTimeBudget


def test_the_budget_resolves_by_device() -> None:
    gpu = EngineConfig(device="cuda")
    gpu.resolve_budgets()
    assert (gpu.concurrent_lanes, gpu.step_budget_ms, gpu.step_cost_device) == (False, 15.0, "cuda")
    cpu = EngineConfig(device="cpu")
    cpu.resolve_budgets()
    assert (cpu.concurrent_lanes, cpu.step_budget_ms, cpu.step_cost_device) == (True, CPU_STEP_BUDGET_MS, "cpu")
    given = EngineConfig(device="cpu", step_budget_ms=50.0)
    given.resolve_budgets()
    assert given.step_budget_ms == 50.0


def test_the_flags_set_it() -> None:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    assert config_from_args(p.parse_args([])).concurrent_lanes is None  # resolved by device
    assert config_from_args(p.parse_args(["--concurrent-lanes"])).concurrent_lanes is True
    assert config_from_args(p.parse_args(["--no-concurrent-lanes"])).concurrent_lanes is False
    assert config_from_args(p.parse_args(["--step-budget-ms", "25"])).step_budget_ms == 25.0
    assert config_from_args(p.parse_args([])).step_decode_ratio == 0.0  # off unless asked
    assert config_from_args(p.parse_args(["--step-decode-ratio", "1.8"])).step_decode_ratio == 1.8


def test_the_scheduler_budget_is_off_without_lanes_or_chunks() -> None:
    on = StepTimeBudget(StepBudgetConfig(20.0, "cuda"))
    assert on.enabled and on.budget_s == 0.02
    assert not StepTimeBudget(None).enabled  # the core's default: off
    assert not StepTimeBudget(StepBudgetConfig(20.0), chunked_prefill=False).enabled  # a prompt runs whole
    with pytest.raises(ValueError, match="budget_ms"):
        StepBudgetConfig(0.0)
    with pytest.raises(ValueError, match="device"):
        StepBudgetConfig(10.0, "tpu")


def test_the_settings_reach_the_scheduler() -> None:
    from pipeline.build import build_model

    on = build_model(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu"))
    assert on.scheduler.budget.enabled and on.scheduler.budget.budget_s == CPU_STEP_BUDGET_MS / 1000
    assert on.scheduler.budget.cost.coefficients == StepTimeBudget(StepBudgetConfig(1.0, "cpu")).cost.coefficients
    assert on.scheduler.budget.decode_ratio == 0.0
    ratio = build_model(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu",
                                     step_decode_ratio=1.8))
    assert ratio.scheduler.budget.decode_ratio == 1.8
    off = build_model(EngineConfig(model="dummy:tiny", num_kv_blocks=64, max_model_len=256, device="cpu",
                                   concurrent_lanes=False))
    assert not off.scheduler.budget.enabled
