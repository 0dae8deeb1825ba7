"""`ttft serve` with a mistake in its flags or its model: exit status 2, one line naming the flag,
and nothing started (no server, no socket file, no traceback, no abort), whatever the mistake."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
TINY = ("--model", "dummy:tiny")


def table(tmp: Path, busy_port: int) -> list[tuple[tuple[str, ...], str]]:
    """(argv after `ttft serve`, the one line it must print)."""
    (tmp / "not-a-model.bin").write_bytes(b"x")
    (tmp / "empty-dir").mkdir()
    (tmp / "a-file").write_text("not a socket")
    rows = [
        (("--port", "99999"), "--port 99999: must be a TCP port, 1-65535 (0: any free port)"),
        (("--port", "-1"), "--port -1: must be a TCP port, 1-65535 (0: any free port)"),
        (("--max-num-seqs", "0"), "--max-num-seqs 0: must be >= 1"),
        (("--max-n", "0"), "--max-n 0: must be >= 1"),
        (("--grammar-compile-timeout-s", "0"), "--grammar-compile-timeout-s 0.0: must be > 0"),
        (("--max-grammar-chars", "0"), "--max-grammar-chars 0: must be >= 1"),
        (("--gpu-memory-utilization", "1.5"), "--gpu-memory-utilization 1.5: must be a fraction in (0, 1]"),
        (("--block-size", "7"), "--block-size 7: must be one of 1, 2, 4, 8, 16, 32, 64, 128 "
                                "(the sizes the attention kernels support)"),
        (("--num-kv-blocks", "1"), "--num-kv-blocks 1: must be >= 2 (block 0 is reserved)"),
        (("--log-level", "loud"), "--log-level loud: must be one of critical, error, warning, info, debug"),
        (("--uds", "/tmp/x.sock", "--uds-mode", "rw"), "--uds-mode rw: must be octal permission bits, e.g. 0600 or 0660"),
        (("--kv-host-gb", "1", "--no-enable-prefix-caching"),
         "--kv-host-gb: the KV tiers hold prefix-cache blocks, so they need --enable-prefix-caching"),
        (("dummy:tiny", "--model", "dummy:smollm2-135m"),
         "the model is given twice: dummy:tiny and --model dummy:smollm2-135m"),
        (("--model", "dummy:nope"), "--model dummy:nope: unknown dummy preset 'nope'; known presets: "),
        (("--model", str(tmp / "missing.gguf")), f"--model {tmp / 'missing.gguf'}: no such file or directory"),
        (("--model", str(tmp / "not-a-model.bin")), f"--model {tmp / 'not-a-model.bin'}: not a .gguf file"),
        (("--model", str(tmp / "empty-dir")), f"--model {tmp / 'empty-dir'}: a model directory needs a config.json"),
        ((*TINY, "--speculative-config", "{nope"), "--speculative-config: "),
        ((*TINY, "--uds", "/nonexistent/dir/x.sock"), "--uds /nonexistent/dir/x.sock: the directory /nonexistent/dir "
                                                     "does not exist"),
        ((*TINY, "--uds", str(tmp / "a-file")), f"--uds {tmp / 'a-file'}: exists and is not a socket"),
        ((*TINY, "--uds", str(tmp / "g.sock"), "--uds-group", "no-such-group-for-ttft"),
         "--uds-group no-such-group-for-ttft: no such group"),
        ((*TINY, "--port", str(busy_port)), f"--port {busy_port}: 127.0.0.1:{busy_port} is in use"),
    ]
    if not torch.cuda.is_available():
        # found after the bind (torch is asked): the socket file goes with the refusal
        rows.append(((*TINY, "--device", "cuda", "--uds", str(tmp / "cuda.sock")),
                     "--device cuda: torch sees no CUDA device here"))
    return rows


def run_serve(args: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "serve", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("refuse")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        rows = table(tmp, busy.getsockname()[1])
        with ThreadPoolExecutor(4) as pool:  # mostly torch's import: a few at once cost about one
            procs = list(pool.map(run_serve, [args for args, _ in rows]))
    return tmp, list(zip(rows, procs))


def test_every_mistake_exits_2_with_its_one_line_and_starts_nothing(outcomes):
    tmp, results = outcomes
    for (args, line), proc in results:
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, (args, out)
        errors = [s for s in proc.stderr.splitlines() if s.startswith("ttft serve: error: ")]
        assert len(errors) == 1 and errors[0].startswith(f"ttft serve: error: {line}"), (args, out)
        assert "Traceback" not in out and "Started server process" not in out and "listening on" not in out, args
    assert not list(tmp.glob("*.sock"))  # no socket file was made
