"""The README's examples are the files under examples/, to the byte, and they run as the README says
to run them: the embedded engine, the app mounted in a parent app under uvicorn, the sidecar on a
Unix socket and its OpenAI SDK client."""
from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLES = ("examples/embed_engine.py", "examples/mount_app.py", "examples/sidecar.sh", "examples/sidecar_client.py")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```$", re.S | re.M)
NAMED = re.compile(r"^# (examples/[\w./-]+):")


def readme_blocks() -> list[str]:
    return FENCE.findall(README.read_text())


def example_blocks() -> dict[str, str]:
    """README code blocks whose first line names an examples/ file: path -> the block's text."""
    named = {}
    for block in readme_blocks():
        if match := NAMED.match(block):
            assert match.group(1) not in named, f"{match.group(1)} is shown twice"
            named[match.group(1)] = block
    return named


def readme_command(prefix: str) -> list[str]:
    """The README's command line that starts with `prefix`, split as a shell would."""
    lines = [line for block in readme_blocks() for line in block.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", README.read_text())  # commands quoted in the prose
    found = [line for line in lines if line.startswith(prefix)]
    assert found, f"the README gives no command starting with {prefix!r}"
    return shlex.split(found[0])


def env() -> dict[str, str]:
    """As with `.venv` active: this interpreter's scripts first on PATH, this checkout importable."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, transport: httpx.HTTPTransport | None = None, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(transport=transport, timeout=5) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
    raise AssertionError(f"{url} never answered 200")


def test_every_example_is_in_the_readme_as_its_file_is():
    shown = example_blocks()
    assert sorted(shown) == sorted(EXAMPLES)
    for path in EXAMPLES:
        assert shown[path] == (ROOT / path).read_text(), f"README's {path} differs from the file"


def test_the_embedding_example_runs():
    argv = readme_command("python examples/embed_engine.py")
    proc = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env(), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip()) > 0 and "Traceback" not in proc.stderr


def test_the_mounted_app_starts_with_its_parent_and_stops_with_it():
    argv = readme_command("uvicorn examples.mount_app:app")
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/llm/health")  # ready without any request having started it
        with httpx.Client(base_url=base, timeout=60) as client:
            assert client.get("/").json()["llm"] == "/llm/v1/chat/completions"
            reply = client.post("/llm/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
            assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode in (0, -signal.SIGTERM), out  # uvicorn re-raises the signal it stopped for
    assert "started on its first request" not in out  # (that warning would say the lifespan did not)
    assert "Application shutdown complete" in out


def test_the_sidecar_example_serves_answers_and_cleans_up():
    argv = readme_command("bash examples/sidecar.sh")
    with tempfile.TemporaryDirectory(prefix="ttft-ex-") as d:  # short: a socket path has 107 bytes
        sock = os.path.join(d, "ttft.sock")
        proc = subprocess.run([*argv[:2], sock], cwd=ROOT, env=env(), capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert '"object":"text_completion"' in proc.stdout and '"completion_tokens":16' in proc.stdout
        assert not os.path.exists(sock)


def test_the_sidecar_client_example_talks_to_a_sidecar():
    pytest.importorskip("openai")
    argv = readme_command("python examples/sidecar_client.py")
    with tempfile.TemporaryDirectory(prefix="ttft-ex-") as d:
        sock = os.path.join(d, "ttft.sock")
        server = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "serve", "dummy:tiny", "--uds", sock],
                                  cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for("http://ttft/health", httpx.HTTPTransport(uds=sock))
            proc = subprocess.run([sys.executable, argv[1], sock], cwd=ROOT, env=env(), capture_output=True,
                                  text=True, timeout=120)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
