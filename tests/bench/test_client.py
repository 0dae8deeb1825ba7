"""The client against the fake server: measured TTFT/ITL match the server's known delays."""
from __future__ import annotations

import asyncio
import statistics

import orjson
import pytest

import bench.client
from bench.client import BenchClient, build_payload
from bench.sample import StreamRecorder
from bench.workloads import BenchRequest, random_workload

TTFT_S, ITL_S = 0.060, 0.020
LATE_S = 0.200  # a busy shared machine delays the fake server's sleeps; exact checks use its stamps


def _send_all(client: BenchClient, reqs: list[BenchRequest], concurrency: int = 2):
    async def go():
        async with client:
            await client.resolve_model()
            await client.send(random_workload(1, 4, 2, seed=99, prompt_format="text")[0])  # warm-up
            sem = asyncio.Semaphore(concurrency)

            async def one(r):
                async with sem:
                    return await client.send(r)

            return await asyncio.gather(*(one(r) for r in reqs))

    return asyncio.run(go())


class StampedRecorder(StreamRecorder):
    """Also keeps, per content chunk, (client arrival, server sent_at, server received_at)."""

    # Every recorder is kept (so no id is reused) with its own stamps; a retried request has
    # several recorders for one sample, and the last one is the attempt that counted.
    recorders: list["StampedRecorder"] = []

    def on_event(self, payload: bytes, t: float) -> None:
        if not hasattr(self, "stamp_list"):
            self.stamp_list: list[tuple[float, float, float]] = []
            StampedRecorder.recorders.append(self)
        if payload != b"[DONE]" and b"fake_sent_at" in payload:
            d = orjson.loads(payload)
            self.stamp_list.append((t, d["fake_sent_at"], d["fake_received_at"]))
        super().on_event(payload, t)

    @classmethod
    def stamps_of(cls, sample) -> list[tuple[float, float, float]]:
        return [r for r in cls.recorders if r.sample is sample][-1].stamp_list


@pytest.mark.parametrize("transport", ["raw", "httpx"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_timings_match_known_delays(fake_server, transport, endpoint, monkeypatch):
    monkeypatch.setattr(bench.client, "StreamRecorder", StampedRecorder)
    StampedRecorder.recorders = []
    fmt = "text" if endpoint == "chat" else "tokens"
    reqs = random_workload(5, input_len=16, output_len=6, seed=1, prompt_format=fmt)
    client = BenchClient(fake_server.base_url, endpoint=endpoint, transport=transport,
                         extra_body={"fake_ttft_s": TTFT_S, "fake_itl_s": ITL_S})
    samples = _send_all(client, reqs)
    lags, send_leads = [], []
    for s in samples:
        assert s.success, s.error
        assert s.status == 200 and s.finish_reason == "length"
        assert s.output_tokens == 6 and len(s.chunk_times_s) == 6 and len(s.itl_s()) == 5
        # never earlier than the server's delays; the chat role delta (empty, sent at once) is no token
        # (1 ms of slack: the event loop may wake a sleeper a hair early, by its clock resolution)
        assert s.ttft_s >= TTFT_S - 1e-3 and s.chunk_times_s[-1] >= TTFT_S + 5 * ITL_S - 1e-3
        assert s.ttft_s < TTFT_S + LATE_S
        # latency ends at the last chunk with choices: the final token's, not the usage chunk or [DONE]
        assert s.latency_s == s.chunk_times_s[-1]
        if endpoint == "completions":
            assert s.prompt_tokens == 16
        # against the server's own clock: each chunk time is its arrival, t_send precedes receipt
        stamps = StampedRecorder.stamps_of(s)
        assert [t for t, _, _ in stamps] == pytest.approx([s.t_send_s + c for c in s.chunk_times_s])
        lags += [t - sent for t, sent, _ in stamps]
        send_leads.append(stamps[0][2] - s.t_send_s)
    assert min(lags) > 0 and min(send_leads) > 0
    # medians loose enough for a busy shared machine (idle: lags ~0.3 ms, leads ~1 ms)
    assert statistics.median(lags) < 0.010 and statistics.median(send_leads) < 0.050
    # the server sleeps ITL_S between chunks (late, never early, on a busy machine)
    assert abs(statistics.median(g for s in samples for g in s.itl_s()) - ITL_S) < 0.015


def test_payload_is_what_vllm_sends():
    req = BenchRequest("r", [5, 6, 7], 3, 9)
    body = build_payload(req, "m", "completions", ignore_eos=True, extra={})
    assert body == {"model": "m", "prompt": [5, 6, 7], "max_tokens": 9, "temperature": 0.0, "stream": True,
                    "stream_options": {"include_usage": True}, "ignore_eos": True}
    chat = build_payload(BenchRequest("r", "hi", 1, 9), "m", "chat", ignore_eos=False, extra={"top_k": 1})
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["max_completion_tokens"] == 9
    assert "ignore_eos" not in chat and chat["top_k"] == 1
    with pytest.raises(ValueError, match="text prompts"):
        build_payload(req, "m", "chat", ignore_eos=True, extra={})


@pytest.mark.parametrize("transport", ["raw", "httpx"])
def test_http_error_is_a_failed_sample(fake_server, transport):
    client = BenchClient(fake_server.base_url, model="fake-model", transport=transport,
                         extra_body={"fake_status": 400})
    [s] = _send_all(client, random_workload(1, 4, 2))
    assert not s.success and s.status == 400
    assert "fake failure" in s.error and s.ttft_s is None


def test_unreachable_server_is_a_failed_sample():
    client = BenchClient("http://127.0.0.1:9", model="m")  # discard port: nothing listens
    [s] = _send_all(client, random_workload(1, 4, 2))
    assert not s.success and s.status == 0 and s.error


def test_keep_alive_reuse_and_server_closed_idle_connection(fake_server):
    """The fake server drops idle connections after 0.3 s: the next request must still succeed."""
    async def go():
        async with BenchClient(fake_server.base_url, model="fake-model") as client:
            first = await client.send(random_workload(1, 4, 2, seed=3)[0])
            again = await client.send(random_workload(1, 4, 2, seed=4)[0])
            reused = len(client.pool._idle) == 1
            await asyncio.sleep(0.6)
            assert client.pool._idle[0].reader.at_eof()  # the server did close it
            late = await client.send(random_workload(1, 4, 2, seed=5)[0])
            return first, again, reused, late

    first, again, reused, late = asyncio.run(go())
    assert first.success and again.success and late.success, (first.error, again.error, late.error)
    assert reused


def test_unix_socket(fake_uds_server):
    client = BenchClient(fake_uds_server.base_url, uds=fake_uds_server.uds, extra_body={"fake_ttft_s": 0.01})
    samples = _send_all(client, random_workload(2, 8, 3))
    assert all(s.success for s in samples), [s.error for s in samples]
    assert client.model == "fake-model"
    assert all(s.ttft_s >= 0.01 - 1e-3 for s in samples)  # the slack of test_timings_match_known_delays


def test_retry_when_kept_alive_connection_closes_on_next_request():
    """A server that answers one request per connection, then closes on the next without a reply."""
    sse = b'data: {"choices":[{"text":"x","finish_reason":"length"}]}\n\ndata: [DONE]\n\n'
    reply = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(sse)) + sse
    num_connections = 0

    async def handle(reader, writer):
        nonlocal num_connections
        num_connections += 1
        await reader.readuntil(b"\r\n\r\n")  # the body (no blank line in it) stays unread
        writer.write(reply)
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # second request on this connection: hang up
        writer.close()

    async def go():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with BenchClient(f"http://127.0.0.1:{port}", model="m") as client:
            samples = [await client.send(r) for r in random_workload(3, 4, 1)]
        server.close()
        return samples

    samples = asyncio.run(go())
    assert all(s.success for s in samples), [s.error for s in samples]
    assert num_connections == 3
