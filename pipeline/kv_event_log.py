"""KvEventLog: which prompt prefixes this replica's KV cache holds, as block-hash events for routers.

A router reads `GET /replica/kv_events` (pipeline/replica_state.py) as vLLM's and llm-d's routers read
KV events: `stored` when blocks enter the cache, `removed` when they are evicted, `all_cleared` when
the router must start over. The router has no tokenizer, so the hashes are in its key space: the
chained hashes of the prompt's 64-character blocks (router/request_key.py, the same function), each
tied to the cache's token blocks that hold it. A token block is tied to the text block whose end
covers its tokens (characters and tokens are aligned in proportion: the router's own estimate), so
the eviction of any token block removes the text block over it and the router's leading run of
held blocks stops there, where the replica's prefix match stops.

With a host-memory KV tier (`--kv-host-gb`) a token block the device evicts into that tier is
still a prefix hit, restored instead of recomputed: its text blocks are published as `offloaded`
(held, at the restore's cost) rather than `removed`, which comes when the host tier evicts it too;
a text block held in the host tier and cached on the device again (fetched back, then finished in
a request) is `stored` again. The disk tier below is not published (its hits cost a read).

Nothing of this runs until a router has asked once (`subscribed`): a server without a router pays
nothing. Then a request costs one dict entry when admitted; its hashes are computed when a router
next asks, in that request, from the prompts finished since, checked against the cache as it is
then (a block evicted meanwhile is simply not published). That work runs on the event loop (the
pool is the scheduler's) at about 90 us per 1,000 prompt characters, so each ask does at most
`max_publish_s` of it and leaves the rest for the next; past `max_unread` waiting prompts the
oldest go unpublished (the router then has only its own guess for them). Bounded throughout: the
events kept for routers, the prompts waiting, and the ties (one per cached token block).
Restarting the replica starts a new log (`epoch`); a router whose place is older than the oldest
event kept, or of another epoch, gets `all_cleared` and a snapshot of what is held.
"""
from __future__ import annotations

import secrets
import time
from collections import OrderedDict, deque
from typing import Callable, Sequence

import orjson

from router.request_key import chained_block_hashes, prompt_text
from scheduler.prefix_cache import extend_block_hashes

BLOCK_BYTES = 64  # router/request_key.py's BLOCK_CHARS: the hashes are over UTF-8 bytes
MAX_EVENTS = 4096
MAX_UNREAD_PROMPTS = 2048
MAX_PUBLISH_S = 0.002  # of loop time per router's ask: a token step must not wait on publishing


class KvEventLog:
    def __init__(self, lookup: Callable[[bytes], int | None], block_size: int, max_events: int = MAX_EVENTS,
                 max_unread: int = MAX_UNREAD_PROMPTS,
                 host_lookup: Callable[[bytes], int | None] | None = None) -> None:
        self.lookup = lookup  # the pool's: token block hash -> the block holding it, or None
        self.host_lookup = host_lookup  # the host tier's (None: no tiers): token block hash -> its slot
        self.block_size = block_size
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self.subscribed = False
        self.events: deque[tuple[int, str, tuple[bytes, ...]]] = deque(maxlen=max_events)
        self.max_unread = max_unread
        self.max_publish_s = MAX_PUBLISH_S
        self._admitted: OrderedDict[str, tuple[bytes, Sequence[int], str | None]] = OrderedDict()
        self._finished: deque[tuple[bytes, Sequence[int], str | None]] = deque(maxlen=max_unread)
        self._texts_on: dict[bytes, list[bytes]] = {}  # token block hash -> text block hashes tied to it
        self._held: set[bytes] = set()  # text block hashes published as stored (or offloaded) and not removed
        self._on_host: set[bytes] = set()  # of those, the ones published as offloaded (host tier only)

    # -- fed by the server ---------------------------------------------------------------------
    def admitted(self, request_id: str, prompt: bytes | str, prompt_token_ids: Sequence[int],
                 cache_salt: str | None) -> None:
        """A request entered the engine (only called once subscribed). `prompt`: its HTTP body (bytes,
        read as the router reads it) or, from the embedding API, the prompt text the router's
        `prompt_text` gives for it (str)."""
        self._admitted[request_id] = (prompt, prompt_token_ids, cache_salt)
        if len(self._admitted) > self.max_unread:  # one that never finished (a lost abort): forget it
            self._admitted.popitem(last=False)

    def finished(self, request_id: str) -> None:
        """Its prompt's blocks are cached now (or were evicted already: checked when read)."""
        source = self._admitted.pop(request_id, None)
        if source is not None:
            self._finished.append(source)

    def evicted(self, token_hash: bytes) -> None:
        """The pool evicted a cached block (BlockPool.on_evict, chained after the tiers' offload)."""
        if self.host_lookup is not None and self.host_lookup(token_hash) is not None:
            texts = self._texts_on.get(token_hash, ())  # still tied: the host tier's eviction removes them
            moved = tuple(t for t in texts if t in self._held and t not in self._on_host)
            if moved:
                self._on_host.update(moved)
                self._emit("offloaded", moved)
            return
        self._drop(token_hash)

    def host_evicted(self, token_hash: bytes) -> None:
        """The host tier dropped a block (HostIndex.on_evict); one the device still holds stays tied."""
        if self.lookup(token_hash) is None:
            self._drop(token_hash)

    def _drop(self, token_hash: bytes) -> None:
        texts = self._texts_on.pop(token_hash, None)
        if texts:
            gone = tuple(t for t in texts if t in self._held)
            self._held.difference_update(gone)
            self._on_host.difference_update(gone)
            if gone:
                self._emit("removed", gone)

    # -- read by routers -----------------------------------------------------------------------
    def read(self, epoch: str | None, after: int) -> list[tuple[int, str, tuple[bytes, ...]]]:
        """The events after `after` in log `epoch`; all_cleared and a snapshot when those are gone."""
        self.subscribed = True
        self._publish_finished()
        oldest = self.events[0][0] if self.events else self.seq + 1
        if epoch == self.epoch and after <= self.seq and after >= oldest - 1:
            return [e for e in self.events if e[0] > after]
        snapshot = [(self.seq, "all_cleared", ()), (self.seq, "stored", tuple(self._held - self._on_host))]
        return snapshot + ([(self.seq, "offloaded", tuple(self._on_host))] if self._on_host else [])

    def _publish_finished(self) -> None:
        deadline = time.perf_counter() + self.max_publish_s
        while self._finished and time.perf_counter() < deadline:
            body, token_ids, salt = self._finished.popleft()
            stored = self._tie(*prompt_blocks(body), token_ids, salt)
            if stored:
                self._emit("stored", stored)

    def _tie(self, text_hashes: Sequence[bytes], num_bytes: int, token_ids: Sequence[int],
             salt: str | None) -> tuple[bytes, ...]:
        """Tie each text block to the token blocks it covers; the text blocks newly held."""
        if not text_hashes or not num_bytes:
            return ()
        token_hashes: list[bytes] = []
        extend_block_hashes(token_hashes, token_ids, self.block_size, salt)
        num_cached = 0
        for h in token_hashes:  # the leading run the cache holds: where the replica's match stops
            if self.lookup(h) is None:
                break
            num_cached += 1
        new, last_tied = [], -1
        num_tokens = len(token_ids)
        for k, text_hash in enumerate(text_hashes):
            end_token = -(-(k + 1) * BLOCK_BYTES * num_tokens // num_bytes)  # ceil: tokens up to the text's end
            j = -(-end_token // self.block_size) - 1  # the token block holding the last of them
            if j >= num_cached:
                break
            if text_hash not in self._held:  # a held one is tied already (by the prompt that stored it)
                for i in range(last_tied + 1, j + 1):
                    self._texts_on.setdefault(token_hashes[i], []).append(text_hash)
                self._held.add(text_hash)
                new.append(text_hash)
            elif text_hash in self._on_host:  # fetched back from the host tier: on the device again
                self._on_host.discard(text_hash)
                new.append(text_hash)
            last_tied = max(last_tied, j)
        return tuple(new)

    def _emit(self, kind: str, hashes: tuple[bytes, ...]) -> None:
        self.seq += 1
        self.events.append((self.seq, kind, hashes))


def prompt_blocks(prompt: bytes | str) -> tuple[tuple[bytes, ...], int]:
    """The router's block hashes of the request's prompt and the prompt's length in UTF-8 bytes
    (which aligns characters with tokens); ((), 0) for a body the router could not read either.
    `prompt`: a request body (bytes), or the prompt's text already (str)."""
    if isinstance(prompt, str):
        text = prompt
    else:
        try:
            parsed = orjson.loads(prompt)
        except orjson.JSONDecodeError:
            return (), 0
        if not isinstance(parsed, dict):
            return (), 0
        text = prompt_text(parsed)
    return chained_block_hashes(text), len(text.encode("utf-8", "surrogatepass"))


def events_body(log: KvEventLog, epoch: str | None, after: int) -> bytes:
    """GET /replica/kv_events's answer: JSON lines, the log's place first, then each event."""
    events = log.read(epoch, after)
    lines = [orjson.dumps({"type": "log", "epoch": log.epoch, "seq": log.seq})]
    lines += [orjson.dumps({"seq": seq, "type": kind, "block_hashes": [h.hex() for h in hashes]})
              for seq, kind, hashes in events]
    return b"\n".join(lines) + b"\n"


def attach_kv_event_log(pool, block_size: int, host=None) -> KvEventLog:
    """A log fed by `pool`'s evictions (after whatever hook the pool had: the KV tiers' offload) and,
    with `host` (the tiers' HostIndex), by the host tier's."""
    log = KvEventLog(pool.lookup, block_size, host_lookup=host.lookup if host is not None else None)
    previous = pool.on_evict

    def on_evict(block_id: int, block_hash: bytes) -> None:
        if previous is not None:
            previous(block_id, block_hash)
        log.evicted(block_hash)

    pool.on_evict = on_evict
    if host is not None:
        host.on_evict = log.host_evicted
    return log
