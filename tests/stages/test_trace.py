from stages.trace import RequestTrace


def test_marks_keep_the_first_time_and_spans_skip_missing_edges():
    t = RequestTrace("r")
    t.mark("received", 100)
    t.mark("parsed", 150)
    t.mark("parsed", 999)  # a retried edge keeps its first time
    t.mark("queued", 400)  # tokenized never marked (token-id prompt)
    t.mark("first_token_written", 1100)
    assert t.stage_spans() == [("parsed", 100, 150), ("queued", 150, 400), ("first_token_written", 400, 1100)]
    assert t.ttft_s() == 1000 / 1e9


def test_host_work_accumulates_by_category():
    t = RequestTrace("r")
    t.add_host("emit", 2_000)
    t.add_host("emit", 3_000)
    t.add_host("parse", 1_000)
    assert t.host_ns == {"emit": 5_000, "parse": 1_000} and t.host_overhead_s() == 6e-6
    assert t.to_json()["host_ms"] == {"emit": 0.005, "parse": 0.001}
    assert t.host_wall_ns == t.host_ns  # no wall time given: the work's own reading


def test_host_work_keeps_cpu_and_wall_time_apart():
    t = RequestTrace("r")
    t.add_host("schedule", 1_000, wall_ns=4_000)  # the thread waited 3 us for a core
    t.add_host("schedule", 2_000, wall_ns=2_500)
    assert t.host_ns == {"schedule": 3_000} and t.host_wall_ns == {"schedule": 6_500}
    assert t.host_overhead_s() == 3e-6
    assert t.to_json()["host_wall_ms"] == {"schedule": 0.0065}


def test_kv_tier_times_read_as_ms_since_received() -> None:
    t = RequestTrace("r")
    t.mark("received", at_ns=1_000_000_000)
    t.info["kv_tiers"] = {"hit_blocks": {"host": 2, "disk": 1}, "fetch_started_ns": 1_002_000_000,
                          "fetch_done_ns": 1_012_500_000, "wait_started_ns": None, "wait_ns": 3_000_000}
    assert t.to_json()["info"]["kv_tiers"] == {"hit_blocks": {"host": 2, "disk": 1}, "fetch_started_ms": 2.0,
                                               "fetch_done_ms": 12.5, "wait_started_ms": None, "wait_ms": 3.0}
    assert t.info["kv_tiers"]["fetch_started_ns"] == 1_002_000_000  # the trace itself is unchanged
