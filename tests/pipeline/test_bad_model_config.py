"""A model directory whose config asks for long-context features we cannot honour as written (a
YaRN without its factor, a sliding window that is not a positive integer, ...) stops `ttft serve`
at start-up: exit status 2 (bad configuration, not an engine fault) and a message naming the field."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.build import StartupError, build_model
from pipeline.config import EngineConfig

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BASE = {"architectures": ["Qwen2ForCausalLM"], "vocab_size": 400, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}


@pytest.mark.parametrize("change, field", [
    ({"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 128}}, "rope_scaling.factor"),
    ({"use_sliding_window": True, "sliding_window": 0, "max_window_layers": 1}, "sliding_window"),
    ({"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 3}, "max_window_layers"),
])
def test_build_model_turns_a_bad_model_config_into_a_startup_error(tmp_path, change, field) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**BASE, **change}))
    with pytest.raises(StartupError, match=field):
        build_model(EngineConfig(model=str(tmp_path), device="cpu"))


def test_serve_exits_2_naming_the_field(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {**BASE, "rope_scaling": {"type": "yarn", "factor": -4.0, "original_max_position_embeddings": 128}}))
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "serve", "--port", str(free_port()), "--device", "cpu",
         "--model", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "rope_scaling.factor must be > 0" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
