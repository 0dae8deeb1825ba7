"""A CPU server's step threads (gpu_stage/cpu_threads.py): the OpenMP threads its steps run on now,
how often the policy has switched, and the other processes' CPU use it last read. Nothing on a
GPU, where no policy runs."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import Metric

from pipeline.metric_families import ModelFamilies


def cpu_thread_metrics(stages: list, fam: ModelFamilies) -> Iterator[Metric]:
    policy = next((p for s in stages if (p := getattr(s, "thread_policy", None)) is not None), None)
    if policy is None:
        return
    yield fam.gauge("ttft_cpu_step_threads", "OpenMP threads a CPU step runs on now (one while other "
                    "processes want the cores)", policy.current)
    yield fam.counter("ttft_cpu_step_thread_switches", "Changes of the CPU steps' thread count",
                      policy.num_switches)
    yield fam.gauge("ttft_cpu_other_processes_cores", "CPU cores other processes used over the last "
                    "window (steal included)", policy.other_cores)
