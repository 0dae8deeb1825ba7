"""KV tiers below the device pool: a host-memory tier and a disk tier of block files, indexed by
the prefix cache's chained block hashes (see manager.py for how blocks move between them)."""
