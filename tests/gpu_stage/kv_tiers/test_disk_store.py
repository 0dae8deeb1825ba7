"""DiskStore: one file per KV block. Round trips are exact; anything short of a verified block of
this model is a miss (bad files deleted, foreign ones kept); write failures are False, not errors."""
from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from gpu_stage.kv_tiers.block_file import HEADER_NBYTES
from gpu_stage.kv_tiers.disk_store import SUFFIX, TMP_SUFFIX, DiskStore
from gpu_stage.kv_tiers.fingerprint import model_fingerprint

SHAPE = (2, 2, 16, 2, 32)  # [num_layers, 2, block_size, num_kv_heads, head_dim]


def fingerprint(seed: int = 0, dtype: torch.dtype = torch.float32) -> bytes:
    return model_fingerprint(f"dummy:tiny:seed={seed}", str(dtype), 16, SHAPE)


def nbytes(dtype: torch.dtype = torch.float32) -> int:
    return torch.Size(SHAPE).numel() * torch.empty((), dtype=dtype).element_size()


def block_hash(i: int) -> bytes:
    return hashlib.sha256(f"block {i}".encode()).digest()


def block(i: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(i)
    return torch.randn(SHAPE, generator=gen).to(dtype)


# Child processes build the same store without torch (its import is seconds on a busy machine).
CHILD_PRELUDE = f"""
from gpu_stage.kv_tiers.disk_store import DiskStore
HASH, NBYTES = bytes.fromhex("{block_hash(1).hex()}"), {nbytes()}
store = DiskStore({{root!r}}, bytes.fromhex("{fingerprint().hex()}"), NBYTES)
"""


def make_store(root: Path, seed: int = 0, dtype: torch.dtype = torch.float32) -> DiskStore:
    return DiskStore(root, fingerprint(seed, dtype), nbytes(dtype))


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_is_exact(tmp_path: Path, dtype: torch.dtype) -> None:
    store = make_store(tmp_path, dtype=dtype)
    src = block(1, dtype)
    assert store.write(block_hash(1), src)
    out = torch.empty(SHAPE, dtype=dtype)
    assert store.read_into(block_hash(1), out)
    assert torch.equal(out.view(torch.uint8), src.view(torch.uint8))
    path = Path(store.path_of(block_hash(1)))
    assert path.parent.name == block_hash(1).hex()[:2] and path.name == block_hash(1).hex() + SUFFIX
    assert path.stat().st_size == store.file_nbytes == HEADER_NBYTES + nbytes(dtype)
    assert store.contains(block_hash(1)) and not store.contains(block_hash(2))
    assert not store.read_into(block_hash(2), out)  # a plain miss
    assert store.stats().num_hits == 1 and store.stats().num_misses == 1


def test_bytes_payloads_and_buffers(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    payload = os.urandom(nbytes())
    assert store.write(block_hash(1), payload)
    out = bytearray(nbytes())
    assert store.read_into(block_hash(1), memoryview(out)) and bytes(out) == payload
    with pytest.raises(ValueError):
        store.write(block_hash(1), payload[:-1])
    with pytest.raises(ValueError):
        store.write(block_hash(1)[:16], payload)


def test_restart_finds_blocks_oldest_first(tmp_path: Path) -> None:
    old = make_store(tmp_path)
    for i in range(5):
        assert old.write(block_hash(i), block(i))
        t = 1_700_000_000 + 10 * (5 - i)  # block 4 is the oldest
        os.utime(old.path_of(block_hash(i)), (t, t))
    new = make_store(tmp_path)
    assert new.scan() == [block_hash(i) for i in (4, 3, 2, 1, 0)]
    out = torch.empty(SHAPE)
    for i in range(5):
        assert new.read_into(block_hash(i), out) and torch.equal(out, block(i))
    # each hit refreshed its mtime, so the order is now least recently read first
    new.read_into(block_hash(4), out)
    assert new.scan()[-1] == block_hash(4)
    assert new.num_bytes_on_disk() == 5 * new.file_nbytes


def _corrupt_case(tmp_path: Path, damage) -> DiskStore:
    store = make_store(tmp_path)
    assert store.write(block_hash(1), block(1))
    damage(Path(store.path_of(block_hash(1))))
    return store


def _flip(offset: int):
    def damage(path: Path) -> None:
        data = bytearray(path.read_bytes())
        data[offset] ^= 0x40
        path.write_bytes(bytes(data))
    return damage


@pytest.mark.parametrize("damage", [
    lambda p: os.truncate(p, p.stat().st_size - 1),      # truncated payload
    lambda p: os.truncate(p, 10),                        # truncated header
    lambda p: os.truncate(p, 0),                         # empty (power cut after rename)
    lambda p: p.write_bytes(p.read_bytes() + b"\0"),     # one byte too long
    _flip(HEADER_NBYTES), _flip(-1), _flip(HEADER_NBYTES + 5000),  # payload bits
    _flip(0), _flip(50), _flip(80),                      # magic, block hash, payload length
], ids=["trunc-payload", "trunc-header", "empty", "padded", "payload-first", "payload-last",
        "payload-mid", "magic", "hash", "length"])
def test_damaged_files_are_misses_and_removed(tmp_path: Path, damage) -> None:
    store = _corrupt_case(tmp_path, damage)
    out = torch.empty(SHAPE)
    assert not store.read_into(block_hash(1), out)
    assert not store.contains(block_hash(1))
    assert store.stats().num_corrupt == 1


def test_renamed_file_is_a_miss(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.write(block_hash(1), block(1))
    wrong = Path(store.path_of(block_hash(2)))
    os.replace(store.path_of(block_hash(1)), wrong)
    assert not store.read_into(block_hash(2), torch.empty(SHAPE))
    assert not wrong.exists()


def test_scan_removes_damaged_files(tmp_path: Path) -> None:
    store = _corrupt_case(tmp_path, _flip(50))
    assert store.write(block_hash(2), block(2))
    assert make_store(tmp_path).scan() == [block_hash(2)]
    assert not store.contains(block_hash(1))


def test_another_model_is_a_miss_but_its_files_are_kept(tmp_path: Path) -> None:
    seed0, seed1 = make_store(tmp_path, seed=0), make_store(tmp_path, seed=1)
    assert fingerprint(0) != fingerprint(1)
    assert seed0.write(block_hash(1), block(1))
    out = torch.empty(SHAPE)
    assert not seed1.read_into(block_hash(1), out)
    assert seed1.contains(block_hash(1)) and seed1.scan() == []
    assert seed0.read_into(block_hash(1), out) and torch.equal(out, block(1))
    # the other model writing the same prefix replaces the file; now seed 0 misses
    assert seed1.write(block_hash(1), block(9))
    assert not seed0.read_into(block_hash(1), out)
    assert seed1.read_into(block_hash(1), out) and torch.equal(out, block(9))
    assert seed0.scan(remove_foreign=True) == [] and all_files(tmp_path) == []


def test_scan_skips_tmp_and_unknown_files(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.write(block_hash(1), block(1))
    shard = Path(store.path_of(block_hash(1))).parent
    stale, fresh = shard / f"x{TMP_SUFFIX}", shard / f"y{TMP_SUFFIX}"
    stale.write_bytes(b"half a block")
    fresh.write_bytes(b"being written")
    os.utime(stale, (1_600_000_000, 1_600_000_000))
    notes = shard / "README.txt"
    notes.write_text("not ours")
    badname = shard / ("zz" * 32 + SUFFIX)
    badname.write_bytes(b"x")
    assert make_store(tmp_path).scan() == [block_hash(1)]
    assert not stale.exists() and fresh.exists() and notes.exists() and badname.exists()


def test_full_disk_write_is_false_and_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    store = make_store(tmp_path)

    def writev_then_enospc(fd: int, bufs: list) -> int:
        os.write(fd, bytes(bufs[0][:10]))  # a partial tmp file exists when the disk fills
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", writev_then_enospc)
    assert store.write(block_hash(1), block(1)) is False
    assert all_files(tmp_path) == []
    assert store.stats().num_write_errors == 1
    monkeypatch.undo()
    assert store.write(block_hash(1), block(1))  # the disk has room again


def test_file_size_limit_is_a_real_write_error(tmp_path: Path) -> None:
    """A real kernel refusal (EFBIG from RLIMIT_FSIZE, SIGXFSZ ignored) in a child process."""
    script = CHILD_PRELUDE.format(root=str(tmp_path)) + """
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
print(store.write(HASH, bytes(NBYTES)), store.stats().num_write_errors)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).parents[3], timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "1"]
    assert all_files(tmp_path) == []


def test_read_only_directory_write_is_false(tmp_path: Path, monkeypatch) -> None:
    store = make_store(tmp_path)
    real_open = os.open

    def open_erofs(path, flags, *args, **kwargs):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_erofs)
    assert store.write(block_hash(1), block(1)) is False
    monkeypatch.undo()
    assert all_files(tmp_path) == []


def test_unwritable_directory_write_is_false() -> None:
    """A real EACCES: the store's tree is made read-only and written by an unprivileged child
    (root ignores permissions, so under root the child drops to uid 65534 with setpriv)."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("root without setpriv cannot drop privileges")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = subprocess.run([*prefix, sys.executable, "-c", "import gpu_stage.kv_tiers"],
                               capture_output=True, cwd=Path(__file__).parents[3], timeout=120)
        if probe.returncode != 0:
            pytest.skip("uid 65534 cannot import the repository here")
    root = Path(tempfile.mkdtemp(prefix="kv_ro."))
    try:
        make_store(root / "store")
        for p in [root, *root.rglob("*")]:
            p.chmod(0o555)
        script = CHILD_PRELUDE.format(root=str(root / "store")) + (
            "print(store.write(HASH, bytes(NBYTES)), store.contains(HASH))\n")
        done = subprocess.run([*prefix, sys.executable, "-c", script], capture_output=True,
                              text=True, cwd=Path(__file__).parents[3], timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["False", "False"]
        assert all_files(root) == []
    finally:
        for p in [root, *root.rglob("*")]:
            p.chmod(0o755)
        shutil.rmtree(root)


def test_delete(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.delete(block_hash(1))  # missing is fine
    assert store.write(block_hash(1), block(1))
    store.delete(block_hash(1))
    assert not store.contains(block_hash(1)) and store.num_bytes_on_disk() == 0


def test_eight_threads_distinct_hashes(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    blocks = {i: block(i) for i in range(64)}

    def worker(t: int) -> int:
        ok = 0
        out = torch.empty(SHAPE)
        mine = range(t, 64, 8)
        for i in mine:
            ok += store.write(block_hash(i), blocks[i])
        for i in mine:
            ok += store.read_into(block_hash(i), out) and torch.equal(out, blocks[i])
        return ok

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(worker, range(8))) == 128
    assert sorted(store.scan()) == sorted(block_hash(i) for i in range(64))


def test_racing_writers_of_one_hash_never_serve_torn_blocks(tmp_path: Path) -> None:
    """Each writer's block is one byte value throughout; a hit must be exactly one of them."""
    store = make_store(tmp_path)
    stop = threading.Event()
    torn: list[set[int]] = []
    num_hits = 0

    def writer(value: int) -> None:
        data = torch.full((nbytes(),), value, dtype=torch.uint8)
        while not stop.is_set():
            store.write(block_hash(0), data)

    def reader() -> None:
        nonlocal num_hits
        out = torch.empty(nbytes(), dtype=torch.uint8)
        for _ in range(300):
            if store.read_into(block_hash(0), out):
                num_hits += 1
                values = set(out.unique().tolist())
                if len(values) != 1:
                    torn.append(values)

    threads = [threading.Thread(target=writer, args=(v,)) for v in (1, 2, 3)]
    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads + readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    for t in threads:
        t.join()
    assert torn == [] and num_hits > 0
    assert store.stats().num_corrupt == 0  # a rename is atomic: readers never see a partial file
    assert not any(p.name.endswith(TMP_SUFFIX) for p in all_files(tmp_path))
