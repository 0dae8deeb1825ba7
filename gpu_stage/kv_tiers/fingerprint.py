"""Model fingerprints: which model computed a stored KV block.

A block's bytes are only right for the exact weights, dtype, block size and KV layout that wrote
it; the prefix hash covers the tokens, not the model. Every block file carries this 32-byte
fingerprint, and a file whose fingerprint differs is a miss, so a server restarted with another
checkpoint, seed or dtype on the same `--kv-disk-path` recomputes instead of serving stale KV.

Under tensor parallelism a block file holds one rank's shard (its KV heads), so the fingerprint
also names the rank and the world size: a shard is never read by another rank, nor by a server
with another `--tensor-parallel-size` (the block shape alone would not tell: every rank's shard
has the same shape, and replicated KV heads make TP=2 and TP=4 shards alike). One rank (world
size 1) hashes exactly what it hashed before tensor parallelism: today's files stay hits.
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path

_TAG = b"ttft-kv-fingerprint-v1"
_SAMPLE_NBYTES = 1 << 20  # how much of each end of a weight file goes into its identity
DUMMY_PREFIX = "dummy:"


def _put_str(h: hashlib._Hash, text: str) -> None:
    # Length-prefixed, so ("ab", "c") and ("a", "bc") never encode alike.
    raw = text.encode("utf-8")
    h.update(struct.pack("<Q", len(raw)) + raw)


def _canonical_dtype(dtype: str) -> str:
    # str(torch.bfloat16) is "torch.bfloat16"; callers may pass either spelling.
    name = str(dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


def model_fingerprint(identity: str, dtype: str, block_size: int, block_shape: tuple[int, ...],
                      layout_version: int = 1, rank: int = 0, world_size: int = 1) -> bytes:
    """32-byte SHA-256 over a canonical encoding of everything that decides a block's bytes.

    `identity` comes from weights_identity (or ModelSource.fingerprint); `block_shape` is one
    block's slab shape, [num_layers, 2, block_size, num_kv_heads, head_dim]; `layout_version`
    changes whenever the meaning of those bytes changes (e.g. a new KV layout or quantization);
    `rank` of `world_size` is the tensor-parallel shard the block holds (hashed when world_size > 1)."""
    if block_size <= 0 or any(int(d) <= 0 for d in block_shape):
        raise ValueError(f"need a positive block size and shape, got {block_size}, {block_shape}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside a world of {world_size}")
    h = hashlib.sha256(_TAG)
    _put_str(h, identity)
    _put_str(h, _canonical_dtype(dtype))
    h.update(struct.pack("<QQ", int(block_size), len(block_shape)))
    h.update(struct.pack(f"<{len(block_shape)}Q", *(int(d) for d in block_shape)))
    h.update(struct.pack("<Q", int(layout_version)))
    if world_size > 1:
        h.update(b"tensor-parallel" + struct.pack("<QQ", int(rank), int(world_size)))
    return h.digest()


def _file_sample_digest(path: Path) -> tuple[int, str]:
    """(size, SHA-256 of the first and last MiB): catches a replaced or re-quantized checkpoint
    without reading multi-GB files whole."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        h = hashlib.sha256()
        f.seek(0)
        h.update(f.read(_SAMPLE_NBYTES))
        f.seek(max(0, size - _SAMPLE_NBYTES))
        h.update(f.read(_SAMPLE_NBYTES))
    return size, h.hexdigest()


def weights_identity(source: str, seed: int | None, files: list[Path]) -> str:
    """A string naming the weights a model runs with.

    Dummy models (`source` "dummy:<preset>") are fully named by preset and seed:
    "dummy:<preset>:seed=<seed>", the same string as the dummy loader's ModelSource.fingerprint.
    Otherwise the identity is derived from `files` alone: each file's name, size and a digest of
    its first and last MiB. The directory is left out on purpose, so a checkpoint that is moved or
    mounted elsewhere keeps its disk cache; mtimes are left out because copies change them."""
    if source.startswith(DUMMY_PREFIX):
        if seed is None:
            raise ValueError("a dummy model's identity needs its seed")
        return f"{source}:seed={int(seed)}"
    if not files:
        raise ValueError(f"no weight files to identify {source!r}")
    h = hashlib.sha256()
    for path in sorted((Path(p) for p in files), key=lambda p: (p.name, str(p))):
        size, digest = _file_sample_digest(path)
        _put_str(h, path.name)
        h.update(struct.pack("<Q", size))
        _put_str(h, digest)
    return f"files:{h.hexdigest()}"
