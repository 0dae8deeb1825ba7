"""Disk tier I/O throughput: DiskStore.write and read_into for N blocks of M MiB.

    python -m lab.kv_disk_io [--path DIR] [--blocks 64] [--block-mib 2] [--threads 1 4]

Rows, each in MB/s (10^6 bytes) over the whole batch:
  write         buffered writes (no fsync: what the server does by default)
  write+fsync   each file fsync'ed before its rename (the durable upper bound on cost)
  read hot      read_into with the files still in the page cache (a recently spilled block)
  read cold     read_into after each file was flushed and dropped from the page cache with
                posix_fadvise(DONTNEED) (a block from a previous run); no root needed
Every read is verified (header, fingerprint, crc32) as in serving. The directory is a fresh
temporary one under --path and is removed afterwards.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import torch

from gpu_stage.kv_tiers.disk_store import DiskStore

MIB = 1 << 20


def _drop_from_page_cache(store: DiskStore, hashes: list[bytes]) -> None:
    for h in hashes:
        fd = os.open(store.path_of(h), os.O_RDONLY)
        try:
            os.fdatasync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(num_threads: int, fn: Callable[[int], bool], n: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(num_threads) as pool:
        results = list(pool.map(fn, range(n)))
    elapsed = time.perf_counter() - start
    assert all(results), "an I/O call failed"
    return elapsed


def run(root: str, num_blocks: int, block_mib: int, num_threads: int) -> dict[str, float]:
    block_nbytes = block_mib * MIB
    store = DiskStore(root, hashlib.sha256(b"bench").digest(), block_nbytes)
    hashes = [hashlib.sha256(f"{num_threads}:{i}".encode()).digest() for i in range(num_blocks)]
    blocks = [torch.randint(0, 256, (block_nbytes,), dtype=torch.uint8) for _ in range(num_blocks)]
    outs = [torch.empty(block_nbytes, dtype=torch.uint8) for _ in range(num_blocks)]
    total_mb = num_blocks * block_nbytes / 1e6
    rows: dict[str, float] = {}
    rows["write"] = total_mb / _timed(num_threads, lambda i: store.write(hashes[i], blocks[i]),
                                      num_blocks)
    rows["read hot"] = total_mb / _timed(num_threads, lambda i: store.read_into(hashes[i], outs[i]),
                                         num_blocks)
    _drop_from_page_cache(store, hashes)
    rows["read cold"] = total_mb / _timed(
        num_threads, lambda i: store.read_into(hashes[i], outs[i]), num_blocks)
    assert all(torch.equal(a, b) for a, b in zip(blocks, outs))
    rows["write+fsync"] = total_mb / _timed(
        num_threads, lambda i: store.write(hashes[i], blocks[i], fsync=True), num_blocks)
    for h in hashes:
        store.delete(h)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=tempfile.gettempdir())
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--block-mib", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()
    print(f"{args.blocks} blocks of {args.block_mib} MiB under {args.path}, {os.cpu_count()} CPUs")
    print(f"{'threads':>7} {'write':>10} {'write+fsync':>12} {'read hot':>10} {'read cold':>10}  MB/s")
    for num_threads in args.threads:
        with tempfile.TemporaryDirectory(dir=args.path, prefix="kv_disk_io.") as root:
            r = run(root, args.blocks, args.block_mib, num_threads)
        print(f"{num_threads:>7} {r['write']:>10.0f} {r['write+fsync']:>12.0f} "
              f"{r['read hot']:>10.0f} {r['read cold']:>10.0f}")


if __name__ == "__main__":
    main()
