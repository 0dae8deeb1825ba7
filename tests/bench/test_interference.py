"""The interference workload without a server: it sends what its spec says (idle baselines, then N
streams with long and short arrivals on their periods), and its figures are the right ratios of the
right samples (shorts inside a long prefill, gaps overlapping one, long over solo)."""
from __future__ import annotations

import asyncio
import time

import pytest

from bench.interference import InterferenceSpec, Phases, Requests, preset, run_interference
from bench.interference_report import (interference_figures, interference_table, overlaps, prefill_windows,
                                       stream_gaps)
from bench.sample import RequestSample, StreamRecorder
from bench.workloads import BenchRequest

SPEC = InterferenceSpec(num_streams=3, stream_prompt_len=8, stream_output_len=5, long_len=300, long_every_s=0.4,
                        long_output_len=2, short_len=12, short_every_s=0.1, short_output_len=3, duration_s=1.0,
                        idle_shorts=4, idle_decode_s=0.2, solo_longs=2)


class StubServer:
    """Answers every request after a delay per token of its prompt, then a token every 10 ms."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, BenchRequest]] = []

    def recorder(self, req: BenchRequest) -> StreamRecorder:
        return StreamRecorder(RequestSample(req.request_id, req.prompt_len, req.max_tokens), chat=False)

    async def send(self, req: BenchRequest, rec: StreamRecorder) -> RequestSample:
        s = rec.sample
        s.t_send_s = time.perf_counter()
        self.sent.append((s.t_send_s, req))
        await asyncio.sleep(req.prompt_len * 1e-4)
        for _ in range(req.max_tokens):
            s.chunk_times_s.append(time.perf_counter() - s.t_send_s)
            await asyncio.sleep(0.01)
        s.ttft_s, s.latency_s, s.output_tokens, s.success = s.chunk_times_s[0], s.chunk_times_s[-1], req.max_tokens, True
        return s


def test_the_workload_sends_what_its_spec_says() -> None:
    server = StubServer()
    phases = asyncio.run(run_interference(server.send, server.recorder, Requests(SPEC, "tokens", 512, 0)))
    assert len(phases.idle_shorts) == 4 and len(phases.solo_longs) == 2
    assert [s.prompt_len for s in phases.idle_shorts + phases.shorts] == [12] * (4 + len(phases.shorts))
    assert all(s.prompt_len == 300 and s.max_tokens == 2 for s in phases.solo_longs + phases.longs)
    assert len(phases.longs) == 3  # at 0.1, 0.5, 0.9 s of the 1 s loaded phase
    assert len(phases.shorts) == 10  # at 0.05, 0.15, ..., 0.95 s
    loaded = [(t, r) for t, r in server.sent if r.request_id in {s.request_id for s in phases.longs + phases.shorts}]
    t0 = min(t for t, r in loaded if r.request_id.startswith("short")) - 0.05
    longs_at = sorted(t - t0 for t, r in loaded if r.request_id.startswith("long"))
    assert longs_at == pytest.approx([0.1, 0.5, 0.9], abs=0.05)
    # N streams at a time, restarted as they end, in both phases; every prompt its own
    assert phases.idle_streams and phases.streams
    assert all(s.prompt_len == 8 and s.max_tokens == 5 for s in phases.streams)
    prompts = [tuple(r.prompt) for _, r in server.sent]
    assert len(set(prompts)) == len(prompts)
    live = [t for t, r in server.sent if r.request_id.startswith("stream") and t > t0 + 0.2]
    assert live  # streams keep decoding through the loaded phase


def sample(rid: str, t_send: float, ttft: float | None, chunks: list[float] = ()) -> RequestSample:
    s = RequestSample(rid, 1, 1, t_send_s=t_send, ttft_s=ttft, success=ttft is not None)
    s.chunk_times_s = list(chunks)
    return s


def test_figures_divide_the_loaded_samples_by_the_idle_ones() -> None:
    longs = [sample("long-1", 10.0, 2.0), sample("long-2", 20.0, 4.0)]  # prefills [10, 12) and [20, 24)
    shorts = [sample("short-1", 9.0, 0.1), sample("short-2", 11.0, 0.5), sample("short-3", 21.0, 0.7),
              sample("short-4", 23.9, 0.9), sample("short-5", 15.0, 0.2)]  # 2, 3, 4 arrive in a prefill
    stream = sample("stream-1", 0.0, 9.0, [9.0, 9.5, 10.5, 11.0, 13.0, 13.1])  # gaps 0.5 1.0 0.5 2.0 0.1
    idle_stream = sample("stream-0", 0.0, 1.0, [1.0, 1.2, 1.4, 1.8])  # gaps 0.2 0.2 0.4: P50 0.2
    phases = Phases(idle_shorts=[sample("short-0", 0, 0.1), sample("short-0", 0, 0.3)],  # P50 0.2
                    idle_streams=[idle_stream], solo_longs=[sample("long-0", 0, 1.0)], streams=[stream],
                    longs=longs, shorts=shorts)
    assert prefill_windows(longs) == [(10.0, 12.0), (20.0, 24.0)]
    assert overlaps((9.5, 10.5), [(10.0, 12.0)]) and not overlaps((12.0, 13.0), [(10.0, 12.0)])
    assert stream_gaps([stream])[0] == (9.0, 9.5)
    f = interference_figures(phases)
    assert f["num_shorts_during"] == 3 and f["num_shorts"] == 5 and f["num_longs"] == 2
    assert f["short_ttft_idle_p50_ms"] == pytest.approx(200)
    assert f["short_ttft_during_p50_ms"] == pytest.approx(700)
    assert f["short_p50_over_idle"] == pytest.approx(3.5)
    assert f["short_p95_over_idle"] == pytest.approx(f["short_ttft_during_p95_ms"] / 200)
    assert f["itl_idle_p50_ms"] == pytest.approx(200)
    # gaps overlapping a prefill: (9.5, 10.5), (10.5, 11.0), (11.0, 13.0); not (9.0, 9.5) or (13.0, 13.1)
    assert f["num_gaps_during"] == 3
    assert f["itl_during_p99_ms"] == pytest.approx(1000 * (1.0 + 0.98 * 1.0))  # numpy's linear P99 of .5 1 2
    assert f["itl_p99_over_idle"] == pytest.approx(f["itl_during_p99_ms"] / 200)
    assert f["long_ttft_p50_ms"] == pytest.approx(3000) and f["long_over_solo"] == pytest.approx(3.0)
    assert "| on | 200 | 700 / " in interference_table([("on", f)], "t")


def test_no_short_during_a_prefill_is_no_figure_not_a_zero() -> None:
    phases = Phases([sample("short-0", 0, 0.1)], [], [sample("long-0", 0, 1.0)], [], [sample("long-1", 5, 1.0)],
                    [sample("short-1", 1.0, 0.1)])
    f = interference_figures(phases)
    assert f["short_ttft_during_p50_ms"] is None and f["short_p50_over_idle"] is None
    assert f["itl_idle_p50_ms"] is None and f["itl_p99_over_idle"] is None
    assert "| run | 100 | - / - | - / - |" in interference_table([("run", f)], "t")


def test_presets_and_their_overrides() -> None:
    assert (preset("h100").num_streams, preset("h100").long_len, preset("h100").long_every_s,
            preset("h100").short_len, preset("h100").short_every_s) == (8, 32768, 3.0, 128, 0.25)
    cpu = preset("cpu", num_streams=4, long_len=None)
    assert cpu.num_streams == 4 and cpu.long_len == 3000
    with pytest.raises(ValueError, match="short_every_s"):
        InterferenceSpec(short_every_s=0)
