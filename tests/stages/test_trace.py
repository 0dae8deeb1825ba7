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
