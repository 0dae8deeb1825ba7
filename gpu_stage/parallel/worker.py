"""A worker rank (not the driver): build the shard's runner, then run the driver's steps until told
to stop. `python -m gpu_stage.parallel.worker` is the process launch.py starts (and what a
non-driver torchrun rank runs); its place comes from torchrun's variables, its runner from
TTFT_RUNNER_SPEC.

The loop: receive a step (header + packed buffer, step_broadcast.py), run the forward on this
rank's shard (a graph replay when the driver replays one, else eagerly with the received
metadata), take part in its collectives, drop the logits; repeat until the stop header. With KV
tiers, tier copies arrive the same way (run on this rank's shard), and disk jobs on the disk
lanes' threads (sharded_tiers.py).

Exit status: 0 after the stop header; EXIT_FAULT when the step loop or the start-up raised, or the
liveness monitor lost the driver; EXIT_ORPHANED when the process that started it is gone (its
lifeline pipe closed). A worker never outlives its driver: the lifeline, the monitor and the
sockets of the process group (which raise when a peer closes them) each end it.
"""
from __future__ import annotations

import logging
import os
import signal
import threading

import torch

from gpu_stage.kv_tiers.rank_tiers import TierSpec
from gpu_stage.loaders.model_source import ModelSource
from gpu_stage.parallel.group import connect, placement_from_env, store_from_env
from gpu_stage.parallel.liveness import LivenessMonitor, started_key
from gpu_stage.parallel.runner_spec import ENV_VAR, RunnerSpec, build_runner
from gpu_stage.parallel.sharded_tiers import WorkerTiers
from gpu_stage.parallel.step_broadcast import StepBroadcast
from gpu_stage.parallel.tensor_parallel import TensorParallel
from gpu_stage.step_inputs import forward_step
from stages.messages import KvTransferOps
from stages.process_exit import end_process

log = logging.getLogger("ttft.parallel")

LIFELINE_ENV = "TTFT_LIFELINE_FD"
EXIT_FAULT, EXIT_ORPHANED = 3, 4


def serve_steps(runner, steps: StepBroadcast, tiers: WorkerTiers | None = None) -> int:
    """Run the driver's steps (and tier copies, on `tiers`) on this rank's runner until the stop
    header -> how many steps ran."""
    count = 0
    with torch.inference_mode():
        while (step := steps.receive(runner.inputs)) is not None:
            if isinstance(step, KvTransferOps):
                if tiers is None:
                    raise RuntimeError("the driver sent tier copies to a worker without KV tiers")
                tiers.copy(step)
                continue
            if step.shape is not None:
                runner.graphs.replay(step.shape)
            else:  # (with prompt-logprob rows: the driver's lm_head slices, for their gathers)
                forward_step(runner.model, step.staged, runner.kv_cache)
            count += 1
    return count


def _watch_lifeline(fd: int) -> None:
    """Block on the pipe whose write end only the starting process holds: EOF means it is gone."""
    def wait() -> None:
        while os.read(fd, 1):
            pass
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=wait, name="ttft-lifeline", daemon=True).start()


def main(spec: RunnerSpec | None = None, source: ModelSource | None = None) -> int:
    """`spec`: what to build (default: TTFT_RUNNER_SPEC); `source`: its model source, if loaded."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The driver decides when the group stops (a drain, then the stop header): Ctrl-C, which the
    # terminal sends to every process of its group, and torchrun's forwarded SIGTERM do not.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if LIFELINE_ENV in os.environ:
        _watch_lifeline(int(os.environ[LIFELINE_ENV]))
    placement = placement_from_env()
    spec = spec or RunnerSpec.from_json(os.environ[ENV_VAR])
    if spec.cpu_threads is not None:
        torch.set_num_threads(spec.cpu_threads)
    store = store_from_env(placement)
    store.set(started_key(placement.rank), str(os.getpid()))  # the driver waits for these (driver.py)
    group = connect(placement, store, spec.device, spec.collective_timeout_s)

    def lost(reason: str) -> None:  # from the monitor thread: the driver is gone or stopped
        log.error("worker rank %d leaves: %s", placement.rank, reason)
        os._exit(EXIT_FAULT)

    monitor = LivenessMonitor(placement.master_addr, placement.master_port, placement.rank, [0], lost).start()
    try:
        source = source or spec.load_source()
        runner = build_runner(spec, source, TensorParallel.over(group, source.config), group.device)
        runner.warm_thread()
        tiers = WorkerTiers.start(TierSpec(**spec.tiers), runner.kv_cache, runner.parallel) if spec.tiers else None
        monitor.serving()
        count = serve_steps(runner, runner.parallel.steps, tiers)
        if tiers is not None:
            tiers.join()  # the driver ended the disk lanes before the stop header
    except Exception:
        log.exception("worker rank %d failed", placement.rank)
        os._exit(EXIT_FAULT)  # no clean-up collectives: the driver sees the exit
    monitor.stop()
    log.info("worker rank %d ran %d steps; stopping", placement.rank, count)
    group.close()
    return 0


if __name__ == "__main__":
    end_process(main())  # the driver's stop waits for this exit: no interpreter teardown (stages/process_exit.py)
