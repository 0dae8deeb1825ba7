"""Chunked framing and SSE splitting, fed in every possible split of the byte stream."""
from __future__ import annotations

import pytest

from bench.http_parse import BodyDecoder, ProtocolError, SseSplitter, parse_head

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n" \
       b"Connection: keep-alive"
EVENTS = [b'{"a": 1}', b'{"b": "x\\ny"}', b"[DONE]"]
SSE = b"".join(b"data: " + e + b"\n\n" for e in EVENTS)


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, pos = b"", 0
    for n in sizes:
        out += f"{n:x};ext=1\r\n".encode() + body[pos : pos + n] + b"\r\n"
        pos += n
    return out + b"0\r\n\r\n"


def test_parse_head():
    head = parse_head(HEAD)
    assert head.status == 200 and head.reason == "OK" and head.keep_alive
    assert head.headers["transfer-encoding"] == "chunked"
    assert not parse_head(b"HTTP/1.1 503 Service Unavailable\r\nConnection: close").keep_alive
    with pytest.raises(ProtocolError):
        parse_head(b"garbage")


def test_chunked_body_and_sse_any_split():
    sizes = [5, 20, len(SSE) - 25]
    wire = chunked(SSE, sizes)
    for cut in range(len(wire) + 1):
        for cut2 in (cut, min(len(wire), cut + 7)):
            dec, sse, got = BodyDecoder(parse_head(HEAD)), SseSplitter(), []
            for piece in (wire[:cut], wire[cut:cut2], wire[cut2:]):
                got += sse.feed(dec.feed(piece))
            assert dec.done, cut
            assert got == EVENTS, cut
            assert sse.pending == b""


def test_content_length_body():
    dec = BodyDecoder(parse_head(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 5"))
    assert dec.feed(b"he") == b"he" and not dec.done
    assert dec.feed(b"llo") == b"llo" and dec.done
    with pytest.raises(ProtocolError):
        BodyDecoder(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5")).feed_eof()


def test_bad_chunk_size():
    with pytest.raises(ProtocolError):
        BodyDecoder(parse_head(HEAD)).feed(b"zz\r\n")


def test_sse_crlf_comments_and_multiline_data():
    sse = SseSplitter()
    stream = b": ping\r\n\r\nevent: x\r\ndata: one\r\ndata:two\r\n\r\nid: 3\r\n\r\ndata: three\r"
    assert sse.feed(stream) == [b"one\ntwo"]
    assert sse.feed(b"\n\r\n") == [b"three"]
