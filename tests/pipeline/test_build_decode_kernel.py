"""--cpu-decode-kernel: a CPU engine builds the decode kernel before its weights load (a failed
build is the kernel's to report, the engine still serves); without the flag it never asks; the
CLI takes the flag and refuses a value for it."""
from __future__ import annotations

import pytest

import pipeline.build as build
from pipeline.build import plan_runner
from pipeline.cli import build_parsers
from pipeline.config import EngineConfig


@pytest.mark.parametrize("flag,asked", [(True, 1), (False, 0)])
def test_the_kernel_is_built_for_a_cpu_engine_that_asks(monkeypatch, flag: bool, asked: int) -> None:
    calls = []
    monkeypatch.setattr(build, "enable_decode_kernel", lambda: calls.append(1) or False)  # e.g. no compiler
    source, dev, _, _ = plan_runner(EngineConfig(model="dummy:tiny", device="cpu", num_kv_blocks=16,
                                                 cpu_decode_kernel=flag))
    assert dev.type == "cpu" and source.config is not None and len(calls) == asked


def test_the_cli_takes_the_flag_and_refuses_a_value(capsys) -> None:
    parser, _ = build_parsers()
    args = parser.parse_args(["serve", "--cpu-decode-kernel"])
    assert args.cpu_decode_kernel is True
    assert parser.parse_args(["serve"]).cpu_decode_kernel is False
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["serve", "--cpu-decode-kernel=yes"])
    assert exc.value.code == 2
