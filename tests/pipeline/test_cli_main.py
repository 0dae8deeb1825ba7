"""`ttft`'s own parser: `--version`, and `ttft serve MODEL` as vLLM spells it (the same as --model)."""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.cli import build_parsers, command_of, config_from_args, take_model_tag, ttft_version
from pipeline.flag_checks import UsageError

ROOT = Path(__file__).resolve().parents[2]


def serve_args(*argv: str):
    parser, _ = build_parsers()
    args = parser.parse_args(["serve", *argv])
    take_model_tag(args)
    return args


def test_version_prints_the_installed_version_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"ttft {ttft_version()}"
    assert ttft_version() == importlib.metadata.version("ttft")


def test_the_model_as_a_positional_is_the_model_flag():
    assert config_from_args(serve_args("dummy:tiny", "--port", "9000")).model == "dummy:tiny"
    assert config_from_args(serve_args("--port", "9000", "dummy:tiny")).model == "dummy:tiny"
    assert config_from_args(serve_args("--model", "dummy:tiny")).model == "dummy:tiny"
    assert config_from_args(serve_args("dummy:tiny", "--model", "dummy:tiny")).model == "dummy:tiny"
    assert config_from_args(serve_args()).model is None  # the packaged default


def test_two_different_models_are_refused():
    with pytest.raises(UsageError, match="^the model is given twice: dummy:tiny and --model dummy:smollm2-135m$"):
        serve_args("dummy:tiny", "--model", "dummy:smollm2-135m")


def test_serve_help_shows_the_positional():
    _, serve = build_parsers()
    usage = serve.format_usage()
    assert "[MODEL]" in usage and "the same as --model MODEL" in serve.format_help()


def test_the_command_is_the_first_word_that_is_no_option():
    assert command_of(["serve", "--model", "bench"]) == "serve"
    assert command_of(["--version"]) is None and command_of([]) is None
    assert command_of(["bench", "--ablate"]) == "bench" and command_of(["nope", "serve"]) is None


MISTAKES_FOUND_WITHOUT_TORCH = [
    ["--max-n", "0"],
    ["--model", "dummy:nope"],
    ["--model", "dummy:tiny", "--speculative-config", "{nope"],
    ["--model", "dummy:tiny", "--uds", "/nonexistent/dir/x.sock"],
]


def test_serve_refuses_its_mistakes_before_torch_or_the_bench_parser_load():
    code = ("import sys; from pipeline.cli import main\n"
            f"for argv in {MISTAKES_FOUND_WITHOUT_TORCH!r}:\n"
            "    print(main(['serve', *argv]), sorted(m for m in ('bench.cli', 'numpy', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.stdout.splitlines() == ["2 []"] * len(MISTAKES_FOUND_WITHOUT_TORCH), proc.stdout + proc.stderr
