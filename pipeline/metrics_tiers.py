"""Prometheus families of the KV tiers below the device pool (read at scrape time).

`ttft_kv_blocks` keeps counting device blocks only; these count the host and disk tiers, and are
not exported at all while the tiers are off (NoTiers).
"""
from __future__ import annotations

from typing import Iterator

from prometheus_client.core import Metric

from pipeline.metric_families import ModelFamilies
from scheduler.kv_tiers.manager import KvTierManager
from scheduler.kv_tiers.no_tiers import NoTiers


def tier_metrics(tiers: KvTierManager | NoTiers, fam: ModelFamilies) -> Iterator[Metric]:
    if not tiers.enabled:  # off (NoTiers): no families, as there is nothing to count
        return
    st = tiers.stats
    yield fam.gauge_by("ttft_kv_tier_blocks", "KV blocks held per tier below the device", "tier",
                       {"host": len(tiers.host), "disk": len(tiers.disk)})  # (no disk tier: an empty index)
    yield fam.counter_by("ttft_kv_tier_hits", "Prefix blocks found per tier at arrival", "tier", st.hits)
    yield fam.counter_by("ttft_kv_tier_bytes", "Bytes moved between tiers, per direction", "direction", st.bytes)
    yield fam.counter_by("ttft_kv_tier_evictions", "Blocks evicted per tier", "tier", st.evictions)
    yield fam.counter("ttft_kv_prefetch_waits", "Admissions that waited for a fetch instead of recomputing",
                      st.num_prefetch_waits)
    yield fam.counter_by("ttft_kv_tier_errors", "Tier faults degraded to recompute", "kind", {
        "disk_read": st.num_disk_read_errors,
        "disk_write": st.num_disk_write_errors,
        "disk_write_skipped": st.num_disk_writes_skipped,
        "host_full": st.num_host_full_drops,
        "load_deferred": st.num_loads_deferred,
    })
