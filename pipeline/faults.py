"""Test-only fault injection, switched on by the TTFT_FAULT_INJECT environment variable.

    TTFT_FAULT_INJECT='{"fail_step_after": 5}'            the 6th model step raises (engine failure)
    TTFT_FAULT_INJECT='{"fail_request_id_prefix": "bad-"}'  sampling fails for those requests only
    TTFT_FAULT_INJECT='{"kv_disk_read_delay_ms": 300}'     every disk-tier read takes 300 ms longer

Never set in production; the server logs a warning when it is.
"""
from __future__ import annotations

import logging
import os

import orjson

from gpu_stage.model_runner import ModelRunner
from stages.messages import StepBatch

ENV_VAR = "TTFT_FAULT_INJECT"
log = logging.getLogger("ttft.faults")


class InjectedFault(RuntimeError):
    pass


def install_faults(runner: ModelRunner, spec: str | None = None) -> bool:
    spec = os.environ.get(ENV_VAR) if spec is None else spec
    if not spec:
        return False
    conf = orjson.loads(spec)
    log.warning("fault injection is ON: %s", conf)
    if "fail_step_after" in conf:
        limit = int(conf["fail_step_after"])
        seen = {"steps": 0}

        def fail_step(batch: StepBatch) -> None:
            seen["steps"] += 1
            if seen["steps"] > limit:
                raise InjectedFault(f"injected failure at model step {seen['steps']}")

        runner.fault_injector = fail_step
    if "fail_request_id_prefix" in conf:
        prefix = str(conf["fail_request_id_prefix"])

        def fail_request(request_id: str) -> None:
            if request_id.startswith(prefix):
                raise InjectedFault(f"injected failure for request {request_id}")

        runner.request_fault_injector = fail_request
    return True


def disk_read_delay_s(spec: str | None = None) -> float:
    """The injected latency of a disk-tier read (0 unless the test hook asks for one)."""
    spec = os.environ.get(ENV_VAR) if spec is None else spec
    if not spec:
        return 0.0
    return float(orjson.loads(spec).get("kv_disk_read_delay_ms", 0)) / 1e3
