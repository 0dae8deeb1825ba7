"""The pieces of one server's session that the rounds and the ablation share."""
from __future__ import annotations

from bench.baselines.server_process import free_port
from bench.serve_runs import counter_change, failure_reason, server_counters, serve_and_bench


def test_counters_change_over_a_run_and_gauges_are_kept_as_read():
    before = {"ttft_preemptions_total": 3.0, "ttft_prefix_cache_hit_rate": 0.1}
    after = {"ttft_preemptions_total": 10.0, "ttft_prefix_cache_hit_rate": 0.4, 'ttft_kv_tier_hits_total{tier="host"}': 2.0}
    assert counter_change(before, after) == {"ttft_preemptions_total": 7.0, "ttft_prefix_cache_hit_rate": 0.4,
                                             'ttft_kv_tier_hits_total{tier="host"}': 2.0}
    assert counter_change(None, after) is None and counter_change(before, None) is None
    assert server_counters(f"http://127.0.0.1:{free_port()}") is None  # nothing listens: no counters, no error


def test_the_failure_reason_is_the_line_that_names_the_error():
    argparse_exit = "server exited with status 2:\nusage: ttft serve ...\nttft: error: unrecognized arguments: --x"
    assert failure_reason(argparse_exit) == "ttft: error: unrecognized arguments: --x"
    traceback = "server exited with status 1:\nTraceback\n  File x\nValueError: --kv-cache-dtype fp8 needs 8.9"
    assert failure_reason(traceback) == "ValueError: --kv-cache-dtype fp8 needs 8.9"
    assert failure_reason("time budget spent\nmore") == "time budget spent" and failure_reason("") == ""


def test_a_server_that_does_not_start_is_an_error_with_its_log(tmp_path):
    import sys

    command = [sys.executable, "-c", "import sys; print('boom: cannot start'); sys.exit(3)"]
    session = serve_and_bench(command, free_port(), tmp_path / "s.log", [], ready_timeout_s=30)
    assert "status 3" in session.error and "boom: cannot start" in session.error and session.runs == []


def test_a_client_callable_runs_with_the_base_url_and_its_failure_is_recorded(tmp_path, monkeypatch):
    import bench.serve_runs as serve_runs

    class FakeServer:
        base_url, started_s = "http://127.0.0.1:1", 0.5

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def log_tail(self) -> str:
            return "server log"

    monkeypatch.setattr(serve_runs, "start_server", lambda *a, **kw: FakeServer())

    def broken(base_url: str) -> dict:
        raise RuntimeError("client failed")

    session = serve_and_bench(["x"], 1, tmp_path / "s.log", [lambda url: {"metrics": {"url": url}}, broken], 30)
    assert session.error == "" and session.runs[0].result == {"metrics": {"url": "http://127.0.0.1:1"}}
    assert session.runs[1].result is None and "client failed" in session.runs[1].error
    assert "server log" in session.runs[1].error
