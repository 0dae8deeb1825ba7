"""Prometheus families of the KV tiers below the device pool (read at scrape time).

`ttft_kv_blocks` keeps counting device blocks only; these count the host and disk tiers, and are
not exported at all while the tiers are off (NoTiers).
"""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers


def tier_metrics(tiers: KvTierManager | NoTiers) -> Iterator[Metric]:
    if not tiers.enabled:  # off (NoTiers): no families, as there is nothing to count
        return
    st = tiers.stats
    blocks = GaugeMetricFamily("ttft_kv_tier_blocks", "KV blocks held per tier below the device", labels=["tier"])
    blocks.add_metric(["host"], len(tiers.host))
    blocks.add_metric(["disk"], len(tiers.disk))  # (no disk tier: an empty index)
    yield blocks
    hits = CounterMetricFamily("ttft_kv_tier_hits", "Prefix blocks found per tier at arrival", labels=["tier"])
    for tier, num in st.hits.items():
        hits.add_metric([tier], num)
    yield hits
    moved = CounterMetricFamily("ttft_kv_tier_bytes", "Bytes moved between tiers, per direction",
                                labels=["direction"])
    for direction, num in st.bytes.items():
        moved.add_metric([direction], num)
    yield moved
    evictions = CounterMetricFamily("ttft_kv_tier_evictions", "Blocks evicted per tier", labels=["tier"])
    for tier, num in st.evictions.items():
        evictions.add_metric([tier], num)
    yield evictions
    yield CounterMetricFamily("ttft_kv_prefetch_waits", "Admissions that waited for a fetch instead of "
                              "recomputing", value=st.num_prefetch_waits)
    errors = CounterMetricFamily("ttft_kv_tier_errors", "Tier faults degraded to recompute", labels=["kind"])
    errors.add_metric(["disk_read"], st.num_disk_read_errors)
    errors.add_metric(["disk_write"], st.num_disk_write_errors)
    errors.add_metric(["disk_write_skipped"], st.num_disk_writes_skipped)
    errors.add_metric(["host_full"], st.num_host_full_drops)
    errors.add_metric(["load_deferred"], st.num_loads_deferred)
    yield errors
