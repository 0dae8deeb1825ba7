"""DiskStore: the disk tier's I/O layer, one file per KV block named by its chained prefix hash.

Files live at `<root>/<first 2 hex chars>/<64 hex chars>.kvb` (256 shards, so no directory holds
100k entries) in the block_file format. All calls are synchronous and meant for a thread pool:
they share no mutable state except counters (disk_store_stats.py), and the heavy parts (os.writev / os.preadv straight
from / into the caller's buffer, zlib.crc32 over it) release the GIL.

Failure policy, a cache's: a write that fails (ENOSPC, EIO, read-only fs) returns False and leaves
no file behind; a read of anything short of a verified block returns False, so the caller
recomputes. Files that are ours but wrong (truncated, bad crc, wrong hash inside) are deleted;
without fsync a power cut can leave exactly such files, which is why every file carries crcs.
Files with another model's fingerprint are a miss but are kept: two servers with different models
may share a directory, and if one of them wants that name it simply replaces the file on its next
write. `scan(remove_foreign=True)` reclaims them when a directory is reused for a new model.
"""
from __future__ import annotations

import os
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from gpu_stage.kv_tiers.block_file import (FINGERPRINT_NBYTES, HASH_NBYTES, HEADER_NBYTES,
                                           BlockHeader, byte_view, close_quietly, decode_header,
                                           encode_header, read_exact, unlink_quietly, write_all)
from gpu_stage.kv_tiers.disk_store_stats import DiskStoreCounters, DiskStoreStats

SUFFIX = ".kvb"
TMP_SUFFIX = ".tmp"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_OK, _FOREIGN, _CORRUPT = "ok", "foreign", "corrupt"


class DiskStore:
    def __init__(self, path: Path | str, fingerprint: bytes, block_nbytes: int, *,
                 fsync: bool = False, touch_on_read: bool = True,
                 stale_tmp_s: float = 60.0) -> None:
        if len(fingerprint) != FINGERPRINT_NBYTES or block_nbytes <= 0:
            raise ValueError("need a 32-byte fingerprint and block_nbytes > 0")
        self.root = os.fspath(path)
        self.fingerprint = bytes(fingerprint)
        self.block_nbytes = int(block_nbytes)
        self.fsync = fsync  # off by default: a lost block after a power cut is only a miss
        # A hit refreshes the mtime so that scan()'s oldest-first order is least-recently-used,
        # not least-recently-written, across restarts.
        self.touch_on_read = touch_on_read
        self.stale_tmp_s = stale_tmp_s
        self._counters = DiskStoreCounters()
        os.makedirs(self.root, exist_ok=True)  # a bad --kv-disk-path is loud at start-up
        for shard in range(256):  # best effort; write() recreates a missing shard
            try:
                os.makedirs(os.path.join(self.root, f"{shard:02x}"), exist_ok=True)
            except OSError:
                pass

    @property
    def file_nbytes(self) -> int:
        return HEADER_NBYTES + self.block_nbytes

    def stats(self) -> DiskStoreStats:
        return self._counters.snapshot()

    def path_of(self, block_hash: bytes) -> str:
        if len(block_hash) != HASH_NBYTES:
            raise ValueError(f"block hash must be {HASH_NBYTES} bytes, got {len(block_hash)}")
        name = block_hash.hex()
        return os.path.join(self.root, name[:2], name + SUFFIX)

    def contains(self, block_hash: bytes) -> bool:
        """A file exists under this name (unverified: read_into is the check)."""
        return os.path.exists(self.path_of(block_hash))

    def write(self, block_hash: bytes, payload: Any, fsync: bool | None = None) -> bool:
        """Store one block; False (never an exception) when the file system refuses."""
        final = self.path_of(block_hash)
        view = byte_view(payload, self.block_nbytes, writable=False)
        # The crc is taken before the bytes are written: if the caller changes the buffer in
        # between, the file fails its crc on read (a miss), it is never a hit with torn bytes.
        header = encode_header(self.fingerprint, block_hash, len(view), zlib.crc32(view))
        # One tmp name per writer thread, renamed into place: a crash or a concurrent reader
        # never sees half a file under the real name.
        tmp = f"{final}.{os.getpid()}.{threading.get_ident()}{TMP_SUFFIX}"
        fd = -1
        try:
            fd = self._create(tmp)
            write_all(fd, [memoryview(header), view])
            if self.fsync if fsync is None else fsync:
                os.fsync(fd)
            fd, closing = -1, fd  # never closed twice, even when close itself fails
            os.close(closing)
            os.replace(tmp, final)
        except OSError as exc:
            close_quietly(fd)
            unlink_quietly(tmp)
            self._counters.write_failed(exc)
            return False
        self._counters.count("num_writes")
        return True

    def read_into(self, block_hash: bytes, out: Any) -> bool:
        """Fill `out` (block_nbytes, writable) with the stored block. True only when every check
        passed; on False the contents of `out` are unspecified and must not be used."""
        path = self.path_of(block_hash)
        view = byte_view(out, self.block_nbytes, writable=True)
        try:
            fd = os.open(path, os.O_RDONLY | _O_CLOEXEC)
        except OSError:
            self._counters.count("num_misses")
            return False
        st: os.stat_result | None = None
        try:
            st = os.fstat(fd)
            verdict, header = self._check_header(fd, st, block_hash)
            if verdict == _OK:
                if hasattr(os, "posix_fadvise"):  # a larger readahead for one big read
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                ok = read_exact(fd, view, HEADER_NBYTES)
                verdict = _OK if ok and zlib.crc32(view) == header.payload_crc32 else _CORRUPT
            if verdict == _OK and self.touch_on_read:
                try:
                    os.utime(fd)
                except OSError:
                    pass  # read-only media: LRU order degrades to write order
        except OSError:
            verdict = _CORRUPT  # EIO and friends: an unreadable block is a bad block
        finally:
            close_quietly(fd)
        if verdict == _CORRUPT and st is not None:
            self._discard(path, st)
        self._counters.count({_OK: "num_hits", _FOREIGN: "num_misses", _CORRUPT: "num_corrupt"}[verdict])
        return verdict == _OK

    def delete(self, block_hash: bytes) -> None:
        unlink_quietly(self.path_of(block_hash))  # missing is fine; a stuck file only costs space

    def scan(self, remove_foreign: bool = False) -> list[bytes]:
        """Hashes of this model's valid-looking blocks, oldest mtime first. Reads headers only;
        removes stale tmp files and our own bad files; skips (or removes) foreign ones."""
        found: list[tuple[int, bytes]] = []
        now = time.time()
        for entry in self._entries():
            name = entry.name
            try:
                if name.endswith(TMP_SUFFIX):
                    if now - entry.stat().st_mtime > self.stale_tmp_s:
                        os.unlink(entry.path)  # left by a crashed writer
                    continue
                block_hash = bytes.fromhex(name[:-len(SUFFIX)]) if name.endswith(SUFFIX) else b""
            except (OSError, ValueError):
                continue
            if len(block_hash) != HASH_NBYTES:
                continue  # not a file of ours: leave it alone
            try:
                fd = os.open(entry.path, os.O_RDONLY | _O_CLOEXEC)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                verdict, _ = self._check_header(fd, st, block_hash)
            except OSError:
                continue  # unreadable now; read_into will judge it if it is ever wanted
            finally:
                close_quietly(fd)
            if verdict == _OK:
                found.append((st.st_mtime_ns, block_hash))
            elif verdict == _CORRUPT or remove_foreign:
                self._discard(entry.path, st)
        found.sort()
        return [block_hash for _, block_hash in found]

    def num_bytes_on_disk(self) -> int:
        """Bytes of every file under the root: our blocks, tmp files and foreign blocks alike."""
        total = 0
        for entry in self._entries():
            try:
                total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                pass
        return total

    def _check_header(self, fd: int, st: os.stat_result,
                      block_hash: bytes) -> tuple[str, BlockHeader | None]:
        header = decode_header(os.pread(fd, HEADER_NBYTES, 0))
        if header is None:
            return _CORRUPT, None
        if header.fingerprint != self.fingerprint:
            return _FOREIGN, header
        if (header.block_hash != block_hash or header.payload_nbytes != self.block_nbytes
                or st.st_size != self.file_nbytes):
            return _CORRUPT, header  # renamed, truncated or padded
        return _OK, header

    def _entries(self) -> list[os.DirEntry]:
        entries: list[os.DirEntry] = []
        with os.scandir(self.root) as shards:
            for shard in shards:
                if len(shard.name) == 2 and shard.is_dir(follow_symlinks=False):
                    with os.scandir(shard.path) as files:
                        entries.extend(e for e in files if e.is_file(follow_symlinks=False))
        return entries

    def _create(self, tmp: str) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_CLOEXEC
        try:
            return os.open(tmp, flags, 0o644)
        except FileNotFoundError:  # the shard directory was removed under us
            os.makedirs(os.path.dirname(tmp), exist_ok=True)
            return os.open(tmp, flags, 0o644)

    def _discard(self, path: str, st: os.stat_result) -> None:
        # Only unlink the inode we judged: a writer may have renamed a good block into place since.
        try:
            now = os.stat(path)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(path)
        except OSError:
            pass
