"""The block file format: header encode/decode, and the zero-copy buffer and fd helpers."""
from __future__ import annotations

import os
import struct
import zlib

import pytest
import torch

from gpu_stage.kv_tiers import block_file
from gpu_stage.kv_tiers.block_file import (HEADER_NBYTES, MAGIC, byte_view, decode_header,
                                           encode_header, read_exact, write_all)

FP = bytes(range(32))
HASH = bytes(range(100, 132))


def test_header_round_trip_and_layout() -> None:
    raw = encode_header(FP, HASH, 2 << 20, 0xDEADBEEF)
    assert len(raw) == HEADER_NBYTES == 92
    assert raw[:8] == MAGIC
    header = decode_header(raw)
    assert header is not None
    assert (header.fingerprint, header.block_hash) == (FP, HASH)
    assert (header.payload_nbytes, header.payload_crc32, header.version) == (2 << 20, 0xDEADBEEF, 1)
    # little-endian u64 payload length at offset 76, crc of the first 88 bytes at the end
    assert struct.unpack_from("<Q", raw, 76)[0] == 2 << 20
    assert struct.unpack_from("<I", raw, 88)[0] == zlib.crc32(raw[:88])


def test_every_single_byte_flip_is_rejected() -> None:
    raw = encode_header(FP, HASH, 4096, 12345)
    for i in range(HEADER_NBYTES):
        bad = bytearray(raw)
        bad[i] ^= 0x01
        assert decode_header(bytes(bad)) is None, f"flip at byte {i} accepted"


def test_wrong_size_magic_or_version_is_rejected() -> None:
    raw = encode_header(FP, HASH, 4096, 1)
    assert decode_header(raw[:-1]) is None
    assert decode_header(raw + b"\0") is None
    assert decode_header(b"") is None
    for magic, version in ((b"TTFTKVB2", 1), (MAGIC, 2)):  # consistent crc, wrong content
        body = struct.pack("<8sI32s32sQI", magic, version, FP, HASH, 4096, 1)
        assert decode_header(body + struct.pack("<I", zlib.crc32(body))) is None


def test_encode_rejects_wrong_key_lengths() -> None:
    with pytest.raises(ValueError):
        encode_header(FP[:31], HASH, 1, 0)
    with pytest.raises(ValueError):
        encode_header(FP, HASH + b"x", 1, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_byte_view_shares_tensor_memory(dtype: torch.dtype) -> None:
    t = torch.zeros((2, 2, 4, 2, 8), dtype=dtype)
    view = byte_view(t, t.numel() * t.element_size(), writable=True)
    assert view.format == "B" and view.nbytes == t.numel() * t.element_size()
    view[: t.element_size()] = bytes([0xFF]) * t.element_size()  # write through the view
    assert t.reshape(-1)[:1].view(torch.uint8).tolist() == [0xFF] * t.element_size()
    assert torch.count_nonzero(t.reshape(-1)[1:]) == 0


def test_byte_view_rejects_misuse() -> None:
    t = torch.zeros((4, 8))
    with pytest.raises(ValueError):
        byte_view(t.t(), t.numel() * 4, writable=False)  # not contiguous
    with pytest.raises(ValueError):
        byte_view(t, 64, writable=False)  # wrong size
    with pytest.raises(ValueError):
        byte_view(b"\0" * 16, 16, writable=True)  # bytes are read-only
    assert byte_view(bytearray(16), 16, writable=True).nbytes == 16


def test_write_all_resumes_short_writes(tmp_path, monkeypatch) -> None:
    real_writev = os.writev
    monkeypatch.setattr(block_file.os, "writev",
                        lambda fd, bufs: os.write(fd, bytes(bufs[0][:777])))
    payload = os.urandom(10_000)
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    write_all(fd, [memoryview(b"head"), memoryview(payload)])
    os.close(fd)
    monkeypatch.setattr(block_file.os, "writev", real_writev)
    assert path.read_bytes() == b"head" + payload


def test_read_exact_resumes_short_reads_and_reports_eof(tmp_path, monkeypatch) -> None:
    data = os.urandom(10_000)
    path = tmp_path / "f"
    path.write_bytes(data)
    real_preadv = os.preadv
    monkeypatch.setattr(block_file.os, "preadv",
                        lambda fd, bufs, off: real_preadv(fd, [bufs[0][:999]], off))
    out = bytearray(9_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert read_exact(fd, memoryview(out), 1_000)
        assert bytes(out) == data[1_000:]
        assert not read_exact(fd, memoryview(bytearray(9_001)), 1_000)  # one byte past the end
    finally:
        os.close(fd)
