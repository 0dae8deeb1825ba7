"""The PNG fallback canvas: a valid PNG whose pixels are what was drawn."""
from __future__ import annotations

import struct
import zlib

from bench.png_canvas import Canvas


def decode(png: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB PNG without filters, checking every CRC."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + data), kind
        chunks[kind] = data
        pos += 12 + length
    width, height, depth, color_type = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color_type) == (8, 2) and b"IEND" in chunks
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    assert len(raw) == height * stride
    return width, height, [raw[y * stride + 1:(y + 1) * stride] for y in range(height)]


def pixel(rows: list[bytes], x: int, y: int) -> tuple[int, int, int]:
    return tuple(rows[y][3 * x:3 * x + 3])  # type: ignore[return-value]


def test_rectangles_and_text_land_where_drawn(tmp_path):
    c = Canvas(40, 30)
    c.rect(5, 5, 15, 10, (255, 0, 0))
    c.rect(35, 25, 99, 99, (0, 0, 255))  # clipped at the edge, no error
    c.text(20, 0, "1")  # the glyph's top row is 00100: only its middle column is set
    width, height, rows = decode(c.png_bytes())
    assert (width, height) == (40, 30)
    assert pixel(rows, 5, 5) == pixel(rows, 14, 9) == (255, 0, 0)
    assert pixel(rows, 15, 9) == pixel(rows, 4, 5) == (255, 255, 255)
    assert pixel(rows, 39, 29) == (0, 0, 255)
    assert pixel(rows, 22, 0) == (0, 0, 0) and pixel(rows, 21, 0) == (255, 255, 255)
    c.save(tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes() == c.png_bytes()
    assert Canvas.text_width("abc", scale=2) == 36
