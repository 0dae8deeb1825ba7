"""`ttft serve` on CPU puts OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT in the environment before
torch loads its OpenMP runtime (libgomp reads them once, then): the CLI module must not import
torch, and only a CPU server sets them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pipeline.cli as cli

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_cli_does_not_import_torch() -> None:
    code = "import sys, pipeline.cli, bench.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False", out.stderr


def test_the_engine_is_still_importable_from_the_package() -> None:
    from pipeline import Engine, EngineConfig
    from pipeline.engine import Engine as engine_class

    assert Engine is engine_class and EngineConfig.__name__ == "EngineConfig"
    with pytest.raises(AttributeError):
        import pipeline

        pipeline.NoSuchThing  # noqa: B018


@pytest.mark.parametrize("device,has_driver,expected", [
    ("cpu", True, True), ("cpu", False, True), ("cuda", False, False), ("auto", False, True), ("auto", True, False)])
def test_only_a_cpu_server_sets_the_wait_policy_and_spin(monkeypatch, device, has_driver, expected) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    real_exists = os.path.exists
    monkeypatch.setattr(cli.os.path, "exists",
                        lambda p: has_driver if p == "/proc/driver/nvidia" else real_exists(p))
    assert cli.serves_on_cpu(device) is expected
    cli.set_cpu_openmp_env(device)
    assert os.environ.get("OMP_WAIT_POLICY") == ("PASSIVE" if expected else None)
    assert os.environ.get("GOMP_SPINCOUNT") == (str(cli.CPU_SPIN_COUNT) if expected else None)


def test_an_explicit_setting_wins(monkeypatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    cli.set_cpu_openmp_env("cpu")
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE" and os.environ["GOMP_SPINCOUNT"] == "0"
