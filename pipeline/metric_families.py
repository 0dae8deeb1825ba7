"""ModelFamilies: the Prometheus families read at scrape time, each series labelled `model_name`.

vLLM labels every series with the served model's name, and dashboards built for it select on that
label; so do we. A collector builds its families through one of these instead of calling
GaugeMetricFamily / CounterMetricFamily itself, so the label is never forgotten and a new family
(a spec-decode counter, say) is one line:

    fam = ModelFamilies("llama-3-8b")
    yield fam.counter("ttft_preemptions", "Preemptions (by recompute)", stats.num_preemptions)
    yield fam.gauge_by("ttft_kv_blocks", "KV blocks by state", "state", {"free": 3, "used": 5})
"""
from __future__ import annotations

from typing import Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

MODEL_LABEL = "model_name"


class ModelFamilies:
    def __init__(self, model_name: str) -> None:
        self.model_name = model_name

    def gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        fam = GaugeMetricFamily(name, doc, labels=[MODEL_LABEL])
        fam.add_metric([self.model_name], value)
        return fam

    def counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        """`name` without `_total`: the exposition adds it (`ttft_preemptions_total`)."""
        fam = CounterMetricFamily(name, doc, labels=[MODEL_LABEL])
        fam.add_metric([self.model_name], value)
        return fam

    def gauge_by(self, name: str, doc: str, label: str, values: Mapping[str, float]) -> GaugeMetricFamily:
        """One series per entry of `values`, told apart by `label`."""
        fam = GaugeMetricFamily(name, doc, labels=[MODEL_LABEL, label])
        for key, value in values.items():
            fam.add_metric([self.model_name, key], value)
        return fam

    def counter_by(self, name: str, doc: str, label: str, values: Mapping[str, float]) -> CounterMetricFamily:
        fam = CounterMetricFamily(name, doc, labels=[MODEL_LABEL, label])
        for key, value in values.items():
            fam.add_metric([self.model_name, key], value)
        return fam
