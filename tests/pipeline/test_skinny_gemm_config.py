"""--skinny-gemm: the flag reaches EngineConfig and the runner's arguments, off by default; an unknown
value is a CLI error (exit 2) and, in an embedding's EngineConfig, a start-up error; on without the
Triton backend refuses to start before any weight loads."""
from __future__ import annotations

import argparse

import pytest

import pipeline.build as build
from pipeline.build import StartupError, build_model, plan_runner
from pipeline.cli import add_serve_arguments, config_from_args
from pipeline.config import EngineConfig


def parse(*argv: str) -> EngineConfig:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return config_from_args(p.parse_args(list(argv)))


def test_off_by_default_and_the_flag_reaches_the_runner_arguments() -> None:
    assert EngineConfig().skinny_gemm == "off" and parse().skinny_gemm == "off"
    cfg = parse("--skinny-gemm", "on", "--model", "dummy:tiny", "--attention-backend", "triton", "--num-kv-blocks", "8")
    assert cfg.skinny_gemm == "on"
    assert plan_runner(cfg)[3]["skinny_gemm"] == "on"


def test_an_unknown_value_is_a_cli_error_that_lists_the_choices(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--skinny-gemm", "fast")
    assert exc.value.code == 2
    assert "--skinny-gemm: invalid choice: 'fast' (choose from 'off', 'on')" in capsys.readouterr().err


@pytest.mark.parametrize("mode, backend, message", [
    ("on", "auto", "--skinny-gemm on runs the products in a Triton kernel: it needs --attention-backend triton"),
    ("on", "torch", "needs --attention-backend triton"),
    ("fast", "triton", "--skinny-gemm 'fast': must be one of off, on"),
])
def test_what_cannot_run_refuses_before_the_weights_load(monkeypatch, mode: str, backend: str, message: str) -> None:
    def no_runner(*args, **kwargs):
        raise AssertionError("the runner was built")

    monkeypatch.setattr(build.ModelRunner, "build", no_runner)
    with pytest.raises(StartupError, match=message):
        build_model(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=8, skinny_gemm=mode,
                                 attention_backend=backend))
