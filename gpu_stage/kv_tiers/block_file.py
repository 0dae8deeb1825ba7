"""The on-disk format of one KV block: a fixed little-endian header, then the payload bytes.

    offset  size  field
         0     8  magic b"TTFTKVB1"
         8     4  format version (u32)
        12    32  model fingerprint (fingerprint.model_fingerprint)
        44    32  block hash (the chained prefix hash the file is named after)
        76     8  payload length in bytes (u64)
        84     4  crc32 of the payload (u32)
        88     4  crc32 of bytes 0..88 of this header (u32)
        92        payload: the block's slab `kv[block_id]` as raw bytes

The header carries its own crc so that a flipped bit in a length or a hash is caught before any
payload is trusted; the payload crc catches torn or rotted data. The block hash is repeated inside
the file because a file name is not evidence: a renamed or misplaced file must read as a miss.
"""
from __future__ import annotations

import os
import struct
import sys
import zlib
from dataclasses import dataclass
from typing import Any

MAGIC = b"TTFTKVB1"
FORMAT_VERSION = 1
HASH_NBYTES = 32
FINGERPRINT_NBYTES = 32

_BODY = struct.Struct("<8sI32s32sQI")  # everything the header crc covers
_CRC = struct.Struct("<I")
HEADER_NBYTES = _BODY.size + _CRC.size  # 92


@dataclass(frozen=True)
class BlockHeader:
    version: int
    fingerprint: bytes
    block_hash: bytes
    payload_nbytes: int
    payload_crc32: int


def encode_header(fingerprint: bytes, block_hash: bytes, payload_nbytes: int,
                  payload_crc32: int) -> bytes:
    """The HEADER_NBYTES-byte header of a block file whose payload has this length and crc32."""
    if len(fingerprint) != FINGERPRINT_NBYTES:
        raise ValueError(f"fingerprint must be {FINGERPRINT_NBYTES} bytes, got {len(fingerprint)}")
    if len(block_hash) != HASH_NBYTES:
        raise ValueError(f"block hash must be {HASH_NBYTES} bytes, got {len(block_hash)}")
    body = _BODY.pack(MAGIC, FORMAT_VERSION, fingerprint, block_hash, payload_nbytes,
                      payload_crc32 & 0xFFFFFFFF)
    return body + _CRC.pack(zlib.crc32(body))


def decode_header(raw: bytes | bytearray | memoryview) -> BlockHeader | None:
    """The header in `raw`, or None when it is not a valid header of this format version:
    wrong size, bad magic, bad header crc or another version. Never raises on bad bytes."""
    if len(raw) != HEADER_NBYTES:
        return None
    body = bytes(raw[:_BODY.size])
    (stored_crc,) = _CRC.unpack_from(raw, _BODY.size)
    if zlib.crc32(body) != stored_crc:
        return None
    magic, version, fingerprint, block_hash, payload_nbytes, payload_crc = _BODY.unpack(body)
    if magic != MAGIC or version != FORMAT_VERSION:
        return None
    return BlockHeader(version, fingerprint, block_hash, payload_nbytes, payload_crc)


# -- raw I/O of one file: straight from / into the caller's buffer, GIL released in the syscalls --

def byte_view(buf: Any, nbytes: int, writable: bool) -> memoryview:
    """A flat uint8 memoryview over a bytes-like object or a contiguous CPU tensor, without a copy."""
    # torch is looked up, not imported: a tensor implies torch is loaded, and the disk tier's
    # I/O (and the child processes of its tests) stay importable without paying for torch.
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(buf, torch.Tensor):
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise ValueError(f"need a contiguous CPU tensor, got {buf.device} {tuple(buf.shape)}")
        # numpy has no bfloat16, so reinterpret as bytes on the torch side first.
        buf = buf.detach().reshape(-1).view(torch.uint8).numpy()
    view = memoryview(buf)
    if not view.c_contiguous:
        raise ValueError("buffer must be C-contiguous")
    view = view.cast("B")
    if writable and view.readonly:
        raise ValueError("output buffer is read-only")
    if view.nbytes != nbytes:
        raise ValueError(f"buffer holds {view.nbytes} bytes, a block is {nbytes}")
    return view


def write_all(fd: int, bufs: list[memoryview]) -> None:
    """Header and payload in one writev (no concatenated copy), resumed after a short write."""
    while bufs:
        n = os.writev(fd, bufs)
        if n == 0:
            raise OSError("writev wrote nothing")
        while bufs and n >= len(bufs[0]):
            n -= len(bufs.pop(0))
        if bufs:
            bufs[0] = bufs[0][n:]


def read_exact(fd: int, view: memoryview, offset: int) -> bool:
    """Fill `view` from `offset` by preadv into it (no intermediate bytes); False at an early EOF."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n == 0:
            return False  # EOF: the file shrank under us
        done += n
    return True


def close_quietly(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
