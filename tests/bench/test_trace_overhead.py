from bench.trace_overhead import summarize


def trace(prompt: int, **parts: float) -> dict:
    return {"host_ms": parts, "info": {"num_prompt_tokens": prompt, "num_output_tokens": 64}}


def test_totals_parts_and_classes():
    traces = [trace(30, parse=0.1, schedule=1.0), trace(30, parse=0.1, schedule=2.0),
              trace(1000, parse=0.2, tokenize=2.0, schedule=1.0, emit=1.0)]
    s = summarize(traces, short_below=100)
    assert s["n"] == 3 and s["total_p50_ms"] == 2.1
    assert s["tokenize_p50_ms"] == 0.0 and s["schedule_p95_ms"] > 1.8
    assert s["num_short"] == 2 and s["short_total_p50_ms"] == 1.6
    assert s["num_long"] == 1 and s["long_total_p50_ms"] == 4.2


def test_the_wall_clock_summary_reads_host_wall_ms():
    traces = [{**trace(30, parse=0.1), "host_wall_ms": {"parse": 0.3, "emit": 0.5}},
              trace(30, parse=0.2)]  # an older trace without wall times is left out of that summary
    s = summarize(traces, short_below=100, key="host_wall_ms")
    assert s["n"] == 1 and s["total_p50_ms"] == 0.8 and s["emit_p50_ms"] == 0.5
    assert summarize(traces, short_below=100)["n"] == 2
