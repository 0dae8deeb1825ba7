"""The process group of one tensor-parallel engine, from torchrun's standard rendezvous.

Every process learns its place from the environment torchrun sets (and launch.py sets for the
workers it starts on one node): MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK. The
rendezvous store (a TCPStore: torchrun's agent hosts it, or the driver when it starts the workers
itself) carries the group's set-up and the liveness heartbeats. The driver's own store listens on
127.0.0.1 only (`local_store`: torch's TCPStore binds every interface, whatever host it is given),
like gloo's sockets (`keep_gloo_on_loopback`) and every internal socket of a one-node server; under torchrun the store and its address are
torchrun's, which is how several nodes reach it (a multi-node deployment's network is the
operator's to fence). Two groups:
  device group  the default group: NCCL on CUDA (the model's collectives, captured in CUDA graphs),
                gloo on CPU; its `timeout` bounds any collective (a hung peer, as a backstop to the
                heartbeats);
  host group    gloo on CPU tensors for the step headers and packed host buffers (on CPU the same
                kind as the device group, but its own sockets), with no practical timeout: a worker
                waits there while the server is idle.
NVLink multicast (NVLS) stays off in every process: set before the first NCCL communicator exists.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
RENDEZVOUS_TIMEOUT_S = 300.0  # every rank joins within this (a slow node's torch import included)
IDLE_TIMEOUT = timedelta(days=365)  # the host group's: an idle server sends no step for hours


def disable_multicast(env: dict | os._Environ = os.environ) -> None:
    """NVLink multicast off (NCCL's NVLS, torch's symmetric memory, NVSHMEM), whatever was set."""
    env.update(MULTICAST_OFF)


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @property
    def is_driver(self) -> bool:
        return self.rank == 0


def placement_from_env(env: dict | os._Environ = os.environ) -> Placement:
    """This process's place, from torchrun's variables (ValueError naming a missing one)."""
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK") if k not in env]
    if missing:
        raise ValueError(f"tensor parallelism needs torchrun's environment; missing {', '.join(missing)}")
    rank = int(env["RANK"])
    return Placement(rank, int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", rank)), env["MASTER_ADDR"],
                     int(env["MASTER_PORT"]))


def under_torchrun(env: dict | os._Environ = os.environ) -> bool:
    return "TORCHELASTIC_RUN_ID" in env


def local_store(world_size: int, timeout_s: float) -> dist.TCPStore:
    """A rendezvous store for the ranks of this host, listening on 127.0.0.1 at a free port (its
    `port`): the socket is bound here and handed to the store, which owns it from then on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(max(128, world_size))
        port = sock.getsockname()[1]
        return dist.TCPStore("127.0.0.1", port, world_size, is_master=True, wait_for_workers=False,
                             timeout=timedelta(seconds=timeout_s), master_listen_fd=sock.detach())
    finally:
        sock.close()  # (a no-op once detached; closes the socket if binding failed)


def keep_gloo_on_loopback(env: dict | os._Environ = os.environ) -> None:
    """gloo's sockets on the loopback interface, unless GLOO_SOCKET_IFNAME names one (gloo would
    take the address the host name resolves to, often the host's network address)."""
    loopback = next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
    if loopback is not None:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)


def store_from_env(placement: Placement) -> dist.Store:
    """The rendezvous store through torch's env:// handler (a client of torchrun's agent store,
    or the master on rank 0 otherwise)."""
    store, _, _ = next(dist.rendezvous("env://", rank=placement.rank, world_size=placement.world_size,
                                       timeout=timedelta(seconds=RENDEZVOUS_TIMEOUT_S)))
    return store


@dataclass
class ParallelGroup:
    placement: Placement
    device: torch.device
    store: dist.Store
    device_group: dist.ProcessGroup
    host_group: dist.ProcessGroup

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def world_size(self) -> int:
        return self.placement.world_size

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def connect(placement: Placement, store: dist.Store, device_type: str, collective_timeout_s: float) -> ParallelGroup:
    """Create this process's groups (every rank calls it). On CUDA the rank's device is
    cuda:LOCAL_RANK and NCCL's communicator is made now (device_id), so a broken fabric fails
    start-up, not the first request."""
    disable_multicast()
    timeout = timedelta(seconds=collective_timeout_s)
    if device_type == "cuda":
        device = torch.device("cuda", placement.local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", store=store, rank=placement.rank, world_size=placement.world_size,
                                timeout=timeout, device_id=device)
        host_group = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)
    elif device_type == "cpu":
        device = torch.device("cpu")
        dist.init_process_group("gloo", store=store, rank=placement.rank, world_size=placement.world_size,
                                timeout=timeout)
        host_group = dist.new_group(backend="gloo", timeout=IDLE_TIMEOUT)
    else:
        raise ValueError(f"tensor parallelism runs on cuda or cpu, not {device_type!r}")
    return ParallelGroup(placement, device, store, dist.group.WORLD, host_group)


class RankLost(RuntimeError):
    """A collective failed: a peer rank is gone (its sockets closed) or unreachable."""


def rank_lost(exc: BaseException, what: str) -> RankLost:
    """A short message for a failed collective: gloo's own says where in its sources it failed
    ('[.../pair.cc:537] Read error [127.0.0.1]:25002: Connection reset by peer. This is typically
    ...'); keep the sentence after the location."""
    text = str(exc).split("] ", 1)[-1].split(". ", 1)[0]
    return RankLost(f"tensor parallel {what} failed, a rank is gone: {text}")
