"""Incremental HTTP/1.1 response parsing for the raw client: head, body framing, SSE events.

A synchronous core with no I/O, so the client stays a thin loop of `read -> timestamp -> feed` and
the framing is tested on its own. Each `feed` takes whatever bytes one socket read returned; every
event completed by those bytes gets that read's arrival time.
"""
from __future__ import annotations

from dataclasses import dataclass


class ProtocolError(Exception):
    """The server sent bytes that are not valid HTTP/1.1 framing."""


@dataclass(slots=True)
class ResponseHead:
    status: int
    reason: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value

    @property
    def keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"


def parse_head(raw: bytes) -> ResponseHead:
    """Parse the status line and headers (everything before the blank line)."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"bad status line: {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"bad header line: {line!r}")
        headers[name.strip().lower()] = value.strip()
    return ResponseHead(int(parts[1]), parts[2] if len(parts) > 2 else "", headers)


class BodyDecoder:
    """Undo the body framing: `Transfer-Encoding: chunked`, `Content-Length`, or read until close."""

    def __init__(self, head: ResponseHead) -> None:
        self.chunked = "chunked" in head.headers.get("transfer-encoding", "").lower()
        length = head.headers.get("content-length")
        self.remaining = int(length) if (length is not None and not self.chunked) else -1
        self.until_close = not self.chunked and self.remaining < 0
        self.done = self.remaining == 0
        self._buf = bytearray()
        self._state = "size"  # chunked: size -> data -> crlf -> size ... -> trailer
        self._chunk_left = 0

    def feed(self, data: bytes) -> bytes:
        """Body bytes decoded from `data`; sets `done` when the body's end has been seen."""
        if self.done:
            return b""
        if self.chunked:
            return self._feed_chunked(data)
        if self.until_close:
            return data
        out = data[: self.remaining]
        self.remaining -= len(out)
        self.done = self.remaining == 0
        return out

    def feed_eof(self) -> None:
        """The connection closed; only a read-until-close body may end that way."""
        if not self.until_close and not self.done:
            raise ProtocolError("connection closed before the end of the response body")
        self.done = True

    def _feed_chunked(self, data: bytes) -> bytes:
        buf = self._buf
        buf += data
        out = bytearray()
        pos = 0
        while not self.done:
            if self._state == "data":
                take = min(self._chunk_left, len(buf) - pos)
                out += buf[pos : pos + take]
                pos += take
                self._chunk_left -= take
                if self._chunk_left:
                    break
                self._state = "crlf"
            elif self._state == "crlf":
                if len(buf) - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._state = "size"
            else:  # "size" or "trailer": both read one line
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    break
                line = bytes(buf[pos:end])
                pos = end + 2
                if self._state == "trailer":
                    self.done = not line  # the blank line after the (usually empty) trailers
                    continue
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line: {line!r}") from None
                if size == 0:
                    self._state = "trailer"
                else:
                    self._chunk_left = size
                    self._state = "data"
        del buf[:pos]
        return bytes(out)


class SseSplitter:
    """Split a byte stream of server-sent events into the `data` payloads of complete events.

    Comments (lines starting with ':') and fields other than `data` are skipped; the `data` lines of
    one event are joined with newlines, as the SSE spec says.
    """

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")  # a lone trailing CR joins its LF on the next feed
        payloads = []
        start = 0
        while (end := buf.find(b"\n\n", start)) >= 0:
            values = []
            for line in buf[start:end].split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[5:]
                    values.append(value[1:] if value.startswith(b" ") else value)
            if values:
                payloads.append(b"\n".join(values))
            start = end + 2
        self._buf = buf[start:]
        return payloads

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet ended by a blank line."""
        return self._buf
