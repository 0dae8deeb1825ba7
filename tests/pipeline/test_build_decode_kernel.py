"""--cpu-decode-kernel (on by default): a CPU engine builds the decode attention and the fused ops
before its weights load; `--no-cpu-decode-kernel` never asks; a build that fails (no compiler) still
starts the engine, on the torch operators, with the warning logged; the CLI takes both spellings and
refuses a value."""
from __future__ import annotations

import logging

import pytest

import pipeline.build as build
from gpu_stage.attention import cpu_decode_kernel
from gpu_stage.model import cpu_fused
from pipeline.build import plan_runner
from pipeline.cli import build_parsers
from pipeline.config import EngineConfig


@pytest.mark.parametrize("flag,asked", [(True, 2), (False, 0)])
def test_the_kernels_are_built_for_a_cpu_engine_that_asks(monkeypatch, flag: bool, asked: int) -> None:
    calls = []
    monkeypatch.setattr(build, "enable_decode_kernel", lambda: calls.append(1) or False)  # e.g. no compiler
    monkeypatch.setattr(build, "enable_fused_ops", lambda: calls.append(2) or False)
    source, dev, _, _ = plan_runner(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=16,
                                                 cpu_decode_kernel=flag))
    assert dev.type == "cpu" and source.config is not None and len(calls) == asked
    assert EngineConfig().cpu_decode_kernel  # the default


def test_without_a_compiler_the_engine_still_starts_on_the_torch_ops(monkeypatch, caplog, tmp_path) -> None:
    saved = cpu_decode_kernel.kernel(), cpu_fused.library()
    cpu_decode_kernel.disable()
    cpu_fused.disable()
    monkeypatch.setenv("TTFT_CACHE_DIR", str(tmp_path))  # no cached build to fall back on
    monkeypatch.setattr(cpu_decode_kernel, "COMPILER", "no-such-compiler-g++")
    try:
        with caplog.at_level(logging.WARNING, logger="ttft.gpu"):
            source, dev, _, _ = plan_runner(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=16))
        assert dev.type == "cpu" and source.config is not None
        assert cpu_decode_kernel.kernel() is None and cpu_fused.library() is None
        assert "CPU decode kernel: not built" in caplog.text and "CPU fused ops: not built" in caplog.text
    finally:
        cpu_decode_kernel._state["kernel"], cpu_fused._state["lib"] = saved


def test_the_cli_takes_both_spellings_and_refuses_a_value() -> None:
    parser, _ = build_parsers()
    assert parser.parse_args(["serve"]).cpu_decode_kernel is True
    assert parser.parse_args(["serve", "--cpu-decode-kernel"]).cpu_decode_kernel is True
    assert parser.parse_args(["serve", "--no-cpu-decode-kernel"]).cpu_decode_kernel is False
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["serve", "--cpu-decode-kernel=yes"])
    assert exc.value.code == 2
