"""KvEventFeed: each replica's block events (GET /replica/kv_events, pipeline/kv_event_log.py) applied
to the router's PrefixIndex.

The index starts from the router's own guess (a block is where the router sent it); the events add
what the replica holds from traffic this router did not send (other routers, direct clients) and
take out what it evicted (`offloaded`: moved to its host tier, still held), so a conversation is
not sent back to a replica that no longer has its prefix. Per replica the feed keeps the log's epoch and the last event applied; `all_cleared` (a
restarted replica, or a router too far behind) forgets the replica's blocks before the snapshot
that follows it. A body that cannot be read changes nothing: the next answer starts from the same
place.
"""
from __future__ import annotations

import orjson

from router.prefix_index import PrefixIndex

EVENTS_PATH = b"/replica/kv_events"


class KvEventFeed:
    def __init__(self, index: PrefixIndex) -> None:
        self.index = index
        self._places: dict[int, tuple[str, int]] = {}  # replica -> (epoch, last seq applied)
        self.num_events = 0

    def place(self, replica: int) -> tuple[str, int]:
        """The log and the last event of it applied: ("", 0) before the first answer."""
        return self._places.get(replica, ("", 0))

    def path(self, replica: int) -> bytes:
        """Where to ask next: after the last event applied, in the log it came from."""
        epoch, seq = self.place(replica)
        return EVENTS_PATH + b"?epoch=" + epoch.encode() + b"&after=" + str(seq).encode()

    def apply(self, replica: int, body: bytes) -> None:
        try:
            lines = [orjson.loads(line) for line in body.splitlines() if line.strip()]
            head = lines[0]
            epoch, seq = str(head["epoch"]), int(head["seq"])
            events = [(str(e["type"]), [bytes.fromhex(h) for h in e.get("block_hashes", ())]) for e in lines[1:]]
        except (orjson.JSONDecodeError, IndexError, KeyError, TypeError, ValueError):
            return
        for kind, hashes in events:
            if kind == "all_cleared":
                self.index.forget(replica)
            elif kind == "stored":
                self.index.record(replica, hashes)
            elif kind == "offloaded":  # in its host tier now: still a hit, at the restore's cost
                self.index.record(replica, hashes, on_host=True)
            elif kind == "removed":
                self.index.remove(replica, hashes)
        self.num_events += len(events)
        self._places[replica] = (epoch, seq)
