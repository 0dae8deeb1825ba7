"""Prefix cache keys: chained SHA-256 hashes of full blocks, and the longest-cached-prefix lookup.

A block's hash covers its parent block's hash and its own token ids, so equal hashes mean equal
whole prefixes, not just equal blocks. The chain starts from a root that mixes in the request's
`cache_salt` (and a namespace the caller may tie to the model), so hits never cross salts. Only full
blocks are hashed: a partial block's KV is still being written.

SHA-256 over fixed little-endian uint32 token ids is the same in every process and on every machine
(never Python's `hash()`), so a later disk tier can persist these keys across restarts.
"""
from __future__ import annotations

import functools
import hashlib
import struct
import sys
from array import array
from typing import Sequence

from scheduler.block_pool import BlockPool

_ROOT_TAG = b"ttft-prefix-cache-v1"


# Memoized: every request's chain starts here, and computing it cold (OpenSSL's SHA-256 on a
# path nothing else warms) cost ~45-60 us of each request's arrival for the same few values.
# Bounded, since salts come from clients.
@functools.lru_cache(maxsize=1024)
def root_hash(cache_salt: str | None = None, namespace: str = "") -> bytes:
    """The parent hash of a request's first block."""
    h = hashlib.sha256(_ROOT_TAG)
    h.update(struct.pack("<I", len(namespace.encode())) + namespace.encode())
    if cache_salt is not None:
        salt = cache_salt.encode("utf-8")
        h.update(b"\x01" + struct.pack("<I", len(salt)) + salt)
    return h.digest()


def hash_block(parent_hash: bytes, token_ids: Sequence[int]) -> bytes:
    return hashlib.sha256(parent_hash + struct.pack(f"<{len(token_ids)}I", *token_ids)).digest()


def _pack_le_u32(token_ids: Sequence[int]) -> bytes:
    """struct.pack("<nI", *token_ids) in one C call (a whole prompt at arrival, not block by block)."""
    arr = array("I", token_ids)
    if _SWAP_BYTES:
        arr.byteswap()
    return arr.tobytes()


_SWAP_BYTES = sys.byteorder != "little"

try:  # CPython's own SHA-256 (the same digests): OpenSSL's goes through its provider machinery,
    # whose code is cold again at every block boundary of a decode (one hash per 16 tokens)
    from _sha256 import sha256 as _sha256
except ImportError:  # pragma: no cover - Python 3.12+ names the module _sha2
    try:
        from _sha2 import sha256 as _sha256
    except ImportError:
        _sha256 = hashlib.sha256
assert array("I").itemsize == 4, "array('I') must hold 32-bit token ids"


def extend_block_hashes(
    block_hashes: list[bytes], token_ids: Sequence[int], block_size: int,
    cache_salt: str | None = None,
) -> None:
    """Append the hashes of the full blocks of `token_ids` that `block_hashes` lacks (in place:
    a request hashes its prompt once at arrival and each output block once as it fills)."""
    num_full = len(token_ids) // block_size
    if len(block_hashes) >= num_full:
        return
    parent = block_hashes[-1] if block_hashes else root_hash(cache_salt)
    first = len(block_hashes)
    data = _pack_le_u32(token_ids[first * block_size:num_full * block_size])
    num_bytes = 4 * block_size
    sha256 = _sha256  # see its definition
    for offset in range(0, len(data), num_bytes):  # == hash_block, block by block
        parent = sha256(parent + data[offset:offset + num_bytes]).digest()
        block_hashes.append(parent)


def find_cached_prefix(pool: BlockPool, block_hashes: Sequence[bytes], num_tokens: int) -> list[int]:
    """Blocks holding the longest cached prefix of a request with `num_tokens` known tokens.

    Capped one token short of everything: the last known token must be computed to sample the
    next one, so a prompt that is entirely cached recomputes its last block (the block is never
    written in place while other requests read it)."""
    max_hit_blocks = (num_tokens - 1) // pool.block_size
    hits: list[int] = []
    for block_hash in block_hashes[:max_hit_blocks]:
        block_id = pool.lookup(block_hash)
        if block_id is None:
            break
        hits.append(block_id)
    return hits
