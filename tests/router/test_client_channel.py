"""ClientChannel over a transport that records its writes: the head held until the first body part,
chunked or length framing, HEAD and HTTP/1.0, nothing written once the client is gone, and the
disconnect and flow callbacks called when registered late as well as early."""
from __future__ import annotations

from router.client_channel import ClientChannel


class Recorder:
    """A transport's `write`, recorded one call per entry."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


def channel(version: str = "1.1", is_head: bool = False) -> tuple[ClientChannel, Recorder]:
    out = Recorder()
    return ClientChannel(out, version, is_head, keep_alive=True), out


def test_the_head_leaves_with_the_first_part_chunked_and_the_end_with_the_last() -> None:
    ch, out = channel()
    ch.start(200, [(b"content-type", b"text/event-stream")])
    assert out.writes == [] and ch.started and not ch.done
    ch.body(b"data: 1\n\n", True)
    ch.body(b"data: 2\n\n", False)
    assert len(out.writes) == 2
    assert out.writes[0] == (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
                             b"\r\n9\r\ndata: 1\n\n\r\n")
    assert out.writes[1] == b"9\r\ndata: 2\n\n\r\n0\r\n\r\n"
    assert ch.done and ch.keep_alive
    ch.body(b"late", False)  # after the end: dropped
    assert len(out.writes) == 2


def test_a_length_body_is_not_chunked_and_an_empty_end_writes_nothing_more() -> None:
    ch, out = channel()
    ch.start(404, [(b"Content-Length", b"2")])
    ch.body(b"{}", True)
    ch.body(b"", False)
    assert out.writes == [b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\n{}"]


def test_http_1_0_gets_no_chunks_and_a_closed_connection_and_head_gets_no_body() -> None:
    ch, out = channel("1.0")
    ch.start(200, [])
    ch.body(b"abc", False)
    assert out.writes == [b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nabc"] and not ch.keep_alive
    ch, out = channel(is_head=True)
    ch.start(599, [(b"content-length", b"3")])  # a code with no reason phrase
    ch.body(b"abc", False)
    assert out.writes == [b"HTTP/1.1 599 \r\ncontent-length: 3\r\n\r\n"]


def test_once_gone_nothing_is_written_and_the_callback_runs_once_even_if_registered_late() -> None:
    ch, out = channel()
    calls: list[str] = []
    ch.on_gone(lambda: calls.append("early"))
    ch.start(200, [])
    ch.lost()
    ch.lost()
    ch.body(b"x", False)
    assert out.writes == [] and calls == ["early"]
    ch.on_gone(lambda: calls.append("late"))
    assert calls == ["early", "late"]


def test_flow_callbacks_follow_the_transport_and_a_late_registration_sees_a_pause() -> None:
    ch, _ = channel()
    calls: list[str] = []
    ch.pause()
    ch.on_flow(lambda: calls.append("pause"), lambda: calls.append("resume"))
    ch.resume()
    ch.pause()
    assert calls == ["pause", "resume", "pause"] and ch.paused
