"""Two "nodes" on loopback: two torchrun launches (--nnodes 2, one process each) of the same
script make one TP=2 group through torchrun's own rendezvous (its agent's store, env://): rank 0
is the driver, rank 1 runs the worker loop; the driver's greedy tokens equal one process's."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from gpu_stage.parallel.runner_spec import ENV_VAR, RunnerSpec

REPO = Path(__file__).resolve().parents[3]
SPEC = RunnerSpec("dummy:tiny", "cpu", "float32", dict(num_blocks=32, block_size=4, max_num_batched_tokens=32,
                                                       max_num_seqs=4), seed=2, cpu_threads=1)
SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, os.path.join(sys.argv[1], "tests", "gpu_stage"))
    import torch
    from gpu_stage.parallel import worker
    if os.environ["RANK"] != "0":
        sys.exit(worker.main())
    from gpu_runner_helpers import greedy
    from gpu_stage.model_runner import ModelRunner
    from gpu_stage.parallel.driver import TensorParallelDriver
    from gpu_stage.parallel.runner_spec import RunnerSpec
    torch.set_num_threads(1)
    spec = RunnerSpec.from_json(os.environ["TTFT_RUNNER_SPEC"])
    driver = TensorParallelDriver.start(spec, 2)
    assert driver.worker_pids == []  # torchrun started the worker, not the driver
    ours = greedy(driver.runner, "a", [7, 8, 9, 10], 6)
    statuses = driver.close()
    ref = greedy(ModelRunner(spec.load_source(), "cpu", torch.float32, **spec.runner), "a", [7, 8, 9, 10], 6)
    print("TOKENS", ours, ref, statuses, flush=True)
    sys.exit(0 if ours == ref else 1)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_torchrun_nodes_make_one_group(tmp_path):
    script = tmp_path / "node.py"
    script.write_text(SCRIPT)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), ENV_VAR: SPEC.to_json()}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--master-addr", "127.0.0.1", "--master-port", str(port)]
    t0 = time.perf_counter()
    nodes = [subprocess.Popen(torchrun + ["--node-rank", str(rank), str(script), str(REPO)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    try:
        outputs = [node.communicate(timeout=120)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
            node.wait()
    print(f"two torchrun nodes ran in {time.perf_counter() - t0:.1f} s")
    assert [node.returncode for node in nodes] == [0, 0], outputs
    line = next(line for line in outputs[0].splitlines() if "TOKENS" in line)
    print(line)
    assert line.endswith("{}"), line  # no worker processes of the driver's own
