"""KV cache tiers below the GPU pool: pinned host memory, then disk.

This package holds the disk tier's I/O layer: one file per KV block, named by the block's chained
prefix hash (`scheduler.prefix_cache`), stamped with a fingerprint of the model so that a block is
only ever served to the model (weights, dtype, block size, layout) that computed it.
"""
from gpu_stage.kv_tiers.block_file import HEADER_NBYTES, BlockHeader, decode_header, encode_header
from gpu_stage.kv_tiers.disk_store import DiskStore
from gpu_stage.kv_tiers.disk_store_stats import DiskStoreStats
from gpu_stage.kv_tiers.fingerprint import model_fingerprint, weights_identity

__all__ = [
    "HEADER_NBYTES", "BlockHeader", "decode_header", "encode_header",
    "DiskStore", "DiskStoreStats",
    "model_fingerprint", "weights_identity",
]
