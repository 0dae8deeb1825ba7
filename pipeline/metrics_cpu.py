"""A CPU server's processor and step threads: what the CPU has and the path chosen for it
(gpu_stage/cpu_caps.py, as ttft_cpu_info's labels), the OpenMP threads its steps run on now
(gpu_stage/cpu_threads.py), how often the policy has switched, and the other processes' CPU use it
last read. Nothing on a GPU, where neither runs."""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from pipeline.metric_families import MODEL_LABEL, ModelFamilies


def cpu_path_metrics(stages: list, fam: ModelFamilies) -> Iterator[Metric]:
    path = next((p for s in stages if (p := getattr(s, "cpu_path", None)) is not None), None)
    if path is None:
        return
    labels = path.labels()
    family = GaugeMetricFamily("ttft_cpu_info", "The processor, its instruction sets and the CPU path chosen "
                               "(always 1)", labels=[MODEL_LABEL, *labels])
    family.add_metric([fam.model_name, *labels.values()], 1)
    yield family


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
