"""KvTransfer and HostKvPool: a batch's offloads (device -> host) run before its loads (host ->
device), runs of consecutive blocks are copied at once, chunked host pools split runs correctly,
and on CUDA the copies are ordered with the compute stream without a host sync."""
from __future__ import annotations

import pytest
import torch

import gpu_stage.kv_tiers.host_pool as host_pool_module
from gpu_stage.kv.cache import KvCache
from gpu_stage.kv_tiers.host_pool import HostKvPool
from gpu_stage.kv_tiers.transfer import KvTransfer, NoTransfer, runs
from gpu_stage.model.config import ModelConfig
from stages.messages import KvTransferOps

CONFIG = ModelConfig("llama", 100, 64, 128, num_layers=3, num_heads=4, num_kv_heads=2, head_dim=16)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def make(device: str, dtype: torch.dtype, num_slots: int = 8) -> tuple[KvCache, HostKvPool, KvTransfer]:
    cache = KvCache(CONFIG, num_blocks=10, block_size=4, device=device, dtype=dtype)
    cache.kv.copy_(torch.randn(cache.kv.shape, dtype=torch.float32).to(dtype))
    host = HostKvPool(num_slots, cache.block(0).numel(), dtype, pin=device == "cuda")
    return cache, host, KvTransfer(cache, host)


def test_runs_group_consecutive_pairs() -> None:
    assert runs([(3, 0), (4, 1), (5, 2), (9, 3), (1, 7), (2, 8)]) == [(3, 0, 3), (9, 3, 1), (1, 7, 2)]
    assert runs([]) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_offloads_then_loads_round_trip_exactly(device: str, dtype: torch.dtype) -> None:
    cache, host, transfer = make(device, dtype)
    before = cache.kv.clone()
    # Offload blocks 2, 3, 4 and 7; in the same batch load slot 0 (block 2's copy) into block 7,
    # which is only right if every offload runs before any load.
    transfer.run(KvTransferOps(offloads=[(2, 0), (3, 1), (4, 2), (7, 5)], loads=[(0, 7), (1, 8), (2, 9)]))
    if device == "cuda":
        torch.cuda.current_stream().synchronize()
    assert torch.equal(host.slot(0).view(cache.block(0).shape), before[2].cpu())
    assert torch.equal(host.slot(5).view(cache.block(0).shape), before[7].cpu())
    assert torch.equal(cache.kv[7], before[2]) and torch.equal(cache.kv[8], before[3])
    assert torch.equal(cache.kv[9], before[4]) and torch.equal(cache.kv[:7], before[:7])
    assert transfer.num_blocks_moved == 7


def test_a_chunked_host_pool_splits_runs_across_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = KvCache(CONFIG, num_blocks=10, block_size=4, device="cpu", dtype=torch.float32)
    block_nbytes = cache.block(0).numel() * 4
    monkeypatch.setattr(host_pool_module, "CHUNK_BYTES", 3 * block_nbytes)  # 3 slots per chunk
    host = HostKvPool(8, cache.block(0).numel(), torch.float32, pin=False)
    assert [c.shape[0] for c in host.chunks] == [3, 3, 2] and host.run(2, 2) is None
    cache.kv.copy_(torch.randn(cache.kv.shape))
    transfer = KvTransfer(cache, host)
    transfer.run(KvTransferOps(offloads=[(1, 1), (2, 2), (3, 3), (4, 4)]))  # slots 1-4 span two chunks
    transfer.run(KvTransferOps(loads=[(1, 6), (2, 7), (3, 8), (4, 9)]))
    assert torch.equal(cache.kv[6:10], cache.kv[1:5])


@pytest.mark.gpu
def test_cuda_copies_wait_for_the_compute_stream_and_it_waits_for_them() -> None:
    cache, host, transfer = make("cuda", torch.bfloat16)
    # Queue a long kernel on the compute stream that then writes block 2; the offload of block 2
    # must see that write, and a later read of block 9 (loaded) must see the load.
    big = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        big = big @ big / 64
    cache.kv[2].fill_(3.0)
    transfer.run(KvTransferOps(offloads=[(2, 0)], loads=[(0, 9)]))
    total = cache.kv[9].float().sum()  # on the compute stream, after the copies
    assert float(total) == 3.0 * cache.block(0).numel()
    assert torch.equal(host.slot(0).view(cache.block(0).shape).cuda(), cache.kv[2])


def test_no_transfer_runs_nothing_and_refuses_copies() -> None:
    off = NoTransfer()
    assert not off.enabled and KvTransfer.enabled
    assert off.run(KvTransferOps()) is None  # a fence alone: nothing to wait for
    with pytest.raises(AssertionError, match="without a host tier"):
        off.run(KvTransferOps(loads=[(0, 1)]))
