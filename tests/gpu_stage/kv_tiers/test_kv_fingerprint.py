"""Model fingerprints for stored KV blocks: every input changes them, and weight files are
identified from their ends without being read whole."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpu_stage.kv_tiers import fingerprint as fp_module
from gpu_stage.kv_tiers.fingerprint import model_fingerprint, weights_identity
from gpu_stage.loaders.dummy_loader import load_dummy

MIB = 1 << 20
SHAPE = (2, 2, 16, 2, 16)
BASE = dict(identity="dummy:tiny:seed=0", dtype="bfloat16", block_size=16, block_shape=SHAPE,
            layout_version=1)


def test_fingerprint_is_32_bytes_and_deterministic() -> None:
    a = model_fingerprint(**BASE)
    assert len(a) == 32 and a == model_fingerprint(**BASE)
    assert model_fingerprint(**{**BASE, "dtype": "torch.bfloat16"}) == a  # either spelling


@pytest.mark.parametrize("field, value", [
    ("identity", "dummy:tiny:seed=1"), ("dtype", "float16"), ("block_size", 32),
    ("block_shape", (2, 2, 16, 2, 32)), ("block_shape", (2, 2, 16, 2, 16, 1)), ("layout_version", 2),
])
def test_every_input_changes_the_fingerprint(field: str, value: object) -> None:
    assert model_fingerprint(**{**BASE, field: value}) != model_fingerprint(**BASE)


def test_fingerprint_rejects_nonsense_shapes() -> None:
    with pytest.raises(ValueError):
        model_fingerprint(**{**BASE, "block_shape": (2, 0, 16)})


def test_dummy_identity_matches_the_loader_and_needs_a_seed() -> None:
    assert weights_identity("dummy:tiny", 7, []) == "dummy:tiny:seed=7"
    assert weights_identity("dummy:tiny", 7, []) == load_dummy("tiny", seed=7).fingerprint
    assert weights_identity("dummy:tiny", 7, []) != weights_identity("dummy:tiny", 8, [])
    with pytest.raises(ValueError):
        weights_identity("dummy:tiny", None, [])
    with pytest.raises(ValueError):
        weights_identity("/models/x", None, [])


def _write(path: Path, nbytes: int, fill: int = 0x11) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes([fill]) * nbytes)
    return path


def _patch(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"\x99")


def test_file_identity_sees_both_ends_size_and_names(tmp_path: Path) -> None:
    files = [_write(tmp_path / "a" / "model-1.safetensors", 3 * MIB),
             _write(tmp_path / "a" / "model-2.safetensors", 100)]
    base = weights_identity(str(tmp_path / "a"), None, files)
    assert base.startswith("files:")
    assert weights_identity("other", None, list(reversed(files))) == base  # order and path free

    _patch(files[0], 3 * MIB - 1)  # last MiB
    after_last = weights_identity("x", None, files)
    assert after_last != base
    _patch(files[0], 0)  # first MiB
    assert weights_identity("x", None, files) not in (base, after_last)

    _write(files[1], 101)  # size
    assert weights_identity("x", None, files) != base
    moved = [_write(tmp_path / "b" / f.name, f.stat().st_size) for f in files]
    for src, dst in zip(files, moved):
        dst.write_bytes(src.read_bytes())
    assert weights_identity("x", None, moved) == weights_identity("x", None, files)
    renamed = _write(tmp_path / "b" / "renamed.safetensors", 0)
    renamed.write_bytes(files[1].read_bytes())
    assert weights_identity("x", None, [files[0], renamed]) != weights_identity("x", None, files)


def test_file_identity_does_not_read_the_middle(tmp_path: Path, monkeypatch) -> None:
    """The price of a cheap identity, documented: an edit strictly inside the middle is missed,
    and a multi-GB file costs two MiB of reading."""
    big = tmp_path / "big.gguf"
    with open(big, "wb") as f:
        f.truncate(8 << 30)  # sparse 8 GiB
    read_nbytes = 0
    real_open = open

    class Counting(io.FileIO):
        def read(self, n: int = -1) -> bytes:  # type: ignore[override]
            nonlocal read_nbytes
            data = super().read(n)
            read_nbytes += len(data)
            return data

    monkeypatch.setattr(fp_module, "open", lambda p, mode="r": Counting(p, "r"), raising=False)
    ident = weights_identity("x", None, [big])
    assert read_nbytes == 2 * MIB
    monkeypatch.setattr(fp_module, "open", real_open, raising=False)

    mid = _write(tmp_path / "mid.bin", 4 * MIB)
    before = weights_identity("x", None, [mid])
    _patch(mid, 2 * MIB)
    assert weights_identity("x", None, [mid]) == before
    assert ident.startswith("files:")


def test_one_rank_keeps_the_fingerprint_of_before_tensor_parallelism() -> None:
    # The value main computed before tensor parallelism existed (commit ae32d89): today's block
    # files stay hits for a one-rank server.
    before = "1468d10cd678fce1fc578dc53513344f0edd8ac2ccf352a60b8af759afcd475a"
    assert model_fingerprint(**BASE).hex() == before
    assert model_fingerprint(**BASE, rank=0, world_size=1).hex() == before


def test_every_rank_and_world_size_has_its_own_fingerprint() -> None:
    shards = [(0, 1), (0, 2), (1, 2), (0, 4), (1, 4), (2, 4), (3, 4)]
    prints = {model_fingerprint(**BASE, rank=r, world_size=n) for r, n in shards}
    assert len(prints) == len(shards)
    with pytest.raises(ValueError, match="rank 2 outside a world of 2"):
        model_fingerprint(**BASE, rank=2, world_size=2)
