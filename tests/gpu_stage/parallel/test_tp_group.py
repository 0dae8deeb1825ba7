"""The process group's environment: torchrun's variables, NVLink multicast off."""
from __future__ import annotations

import pytest

from gpu_stage.parallel.group import MULTICAST_OFF, disable_multicast, placement_from_env, rank_lost, under_torchrun
from gpu_stage.parallel.launch import describe_exit


def test_placement_from_torchrun_variables():
    env = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
    p = placement_from_env(env)
    assert (p.rank, p.world_size, p.local_rank, p.master_addr, p.master_port) == (3, 4, 1, "10.0.0.1", 29500)
    assert not p.is_driver and placement_from_env({**env, "RANK": "0"}).is_driver
    assert placement_from_env({k: v for k, v in env.items() if k != "LOCAL_RANK"}).local_rank == 3
    with pytest.raises(ValueError, match="missing MASTER_PORT, RANK"):
        placement_from_env({"MASTER_ADDR": "x", "WORLD_SIZE": "2"})
    assert under_torchrun({"TORCHELASTIC_RUN_ID": "none"}) and not under_torchrun(env)


def test_multicast_is_forced_off():
    env = {"NCCL_NVLS_ENABLE": "1", "PATH": "/bin"}
    disable_multicast(env)
    assert env == {**MULTICAST_OFF, "PATH": "/bin"}
    assert MULTICAST_OFF == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                             "NVSHMEM_DISABLE_NVLS": "1"}


def test_exit_descriptions():
    assert describe_exit(2, 77, -9) == "worker rank 2 (pid 77) exited with signal SIGKILL"
    assert describe_exit(1, 5, 3) == "worker rank 1 (pid 5) exited with status 3"


def test_a_failed_collective_says_a_rank_is_gone_in_one_line():
    gloo = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
                        "[127.0.0.1]:25002: Connection reset by peer. This is typically caused by a remote worker "
                        "hanging or bugs in the application. GLHF!")
    assert str(rank_lost(gloo, "all-reduce")) == ("tensor parallel all-reduce failed, a rank is gone: Read error "
                                                  "[127.0.0.1]:25002: Connection reset by peer")


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net writes them) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_drivers_store_listens_on_loopback_only():
    from datetime import timedelta

    import torch.distributed as dist

    from gpu_stage.parallel.group import local_store

    store = local_store(2, 10.0)
    assert listening_addresses(store.port) == {"0100007F"}  # 127.0.0.1, and no "every interface" socket
    client = dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=timedelta(seconds=10))
    client.set("k", "v")
    assert store.get("k") == b"v"
    # torch's own master store, for contrast: it binds every interface whatever host it is given.
    everywhere = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False)
    assert listening_addresses(everywhere.port) - {"0100007F"}


def test_gloo_is_kept_on_loopback_unless_an_interface_is_named():
    from gpu_stage.parallel.group import keep_gloo_on_loopback

    env: dict[str, str] = {}
    keep_gloo_on_loopback(env)
    assert env == {"GLOO_SOCKET_IFNAME": "lo"}
    env = {"GLOO_SOCKET_IFNAME": "eth1"}
    keep_gloo_on_loopback(env)
    assert env == {"GLOO_SOCKET_IFNAME": "eth1"}
