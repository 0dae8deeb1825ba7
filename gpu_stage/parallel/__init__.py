"""Tensor parallelism: one engine over N GPUs (or N CPU processes), one process per rank.

    shard_plan.py      which part of each weight a rank holds; the shard's model shape
    tensor_parallel.py the collectives the model calls (all-reduce, vocabulary-parallel embedding
                       and lm_head)
    group.py           the process group from torchrun's env:// rendezvous (NCCL on GPUs, gloo on CPU)
    step_broadcast.py  a step's packed int32 inputs (and its tier copies) from the driver to every
                       rank, as tensors
    worker.py          a non-driver rank's loop: receive a step, run the forward on its shard
    liveness.py        heartbeats through the rendezvous store: a dead or stopped rank is a fault
    runner_spec.py     what every rank builds (JSON, the same everywhere)
    launch.py          starting the workers of one node when not under torchrun, stopping them
    driver.py          rank 0: the group, the workers, the monitor, and the runner the engine uses
    sharded_tiers.py   KV tiers per rank: tier copies over the step broadcast, each rank's host slots
                       and block files, the start-up agreement on what the disks hold
    disk_lanes.py      disk-tier jobs run on every rank (gloo groups, one per disk thread)

The driver (rank 0) keeps every actor (HTTP, ingress, scheduler, emitter) and the sampler; the
scheduler sees one KV pool: every rank holds the same block ids for its own KV heads.
"""
