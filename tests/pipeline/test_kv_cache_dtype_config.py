"""--kv-cache-dtype: the flag reaches EngineConfig and the pool, an unknown value is a CLI error
listing the choices, and a format the device cannot run refuses to start before any weight loads."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import pipeline.build as build
from pipeline.build import StartupError, build_model
from pipeline.cli import add_serve_arguments, config_from_args
from pipeline.config import EngineConfig


def parse(*argv: str) -> EngineConfig:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


def test_the_flag_sets_the_field_and_auto_is_the_default() -> None:
    assert EngineConfig().kv_cache_dtype == "auto" and parse().kv_cache_dtype == "auto"
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2", "int8", "bfloat16", "float16"):
        assert parse("--kv-cache-dtype", name).kv_cache_dtype == name


def test_an_unknown_value_is_a_cli_error_that_lists_the_choices() -> None:
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", "--kv-cache-dtype", "fp4"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--kv-cache-dtype: invalid choice: 'fp4'" in proc.stderr
    assert "'auto', 'bfloat16', 'float16', 'fp8', 'fp8_e4m3', 'fp8_e5m2', 'int8'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_pool_is_sized_in_the_chosen_format() -> None:
    auto = build_model(EngineConfig(model="dummy:tiny", kv_cache_gb=0.001, max_model_len=256))
    int8 = build_model(EngineConfig(model="dummy:tiny", kv_cache_gb=0.001, max_model_len=256, kv_cache_dtype="int8"))
    assert auto.runner.kv_cache.kv_dtype == "float32" and int8.runner.kv_cache.kv_dtype == "int8"
    # fp32 K/V take 4 bytes a value; int8 one, plus a 2-byte scale per 16 values
    assert int8.num_blocks == int(0.001 * 2**30) // (16 * 2 * 2 * 2 * 18)
    assert auto.num_blocks == int(0.001 * 2**30) // (16 * 2 * 2 * 2 * 16 * 4)


def test_a_format_the_device_cannot_run_refuses_before_the_weights_load(monkeypatch) -> None:
    def cannot(fmt, device):
        raise ValueError(f"--kv-cache-dtype {fmt.name} cannot run on {device}")

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(build, "check_kv_format", cannot)
    monkeypatch.setattr(build, "load_model_source", no_weights)
    with pytest.raises(StartupError, match="--kv-cache-dtype fp8_e4m3 cannot run on cpu"):
        build_model(EngineConfig(model="dummy:tiny", kv_cache_dtype="fp8", num_kv_blocks=8))
