"""`python -m bench.sim.fleet`: data-parallel replicas behind the router, in simulated time.

Each replica is the real Scheduler against the GPU cost model (as bench/sim/engine.py runs one);
the router is the real one (router/core.py: its policies, prefix index and TTFT predictor) and
knows what the live router can know. It sees each request as a body whose prompt is text (four
characters per token, so its own token estimate holds), hashed into its text blocks
(router/request_key.py); every `poll_s` (the live router's health interval) it reads each replica
as its health watch does: the load GET /replica/state publishes (the same function) and the block
events of a KvEventLog on the replica's own block pool (GET /replica/kv_events's body, fed through
KvEventFeed), so evictions reach it late or never, as they do live. The prefill rate is learned
from the TTFTs it observes, in simulated time, from the predictor's prior.
`--oracle` runs the router on what only the simulator knows instead: token-block hashes, exact
prompt lengths, the load after every step and the cost model's prefill rate (the comparison shows
what the router loses by its view). Events (arrivals, step ends, polls) run in time order; a
conversation's next turn arrives a think time after its reply ends (bench/sim/fleet_workloads.py).
Reported: TTFT percentiles of first and returning turns (multi-turn) or of all requests (uniform),
per policy and number of replicas.

    python -m bench.sim.fleet --replicas 8 16 64 --json
"""
from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from dataclasses import dataclass, field

import orjson

from bench.sim.cost_model import StepCostModel
from bench.sim.engine import SimConfig, simulate
from bench.sim.fleet_workloads import OUTPUT_TOKENS, Turn, conversations, uniform
from bench.sim.workloads import SimRequest
from pipeline.kv_event_log import KvEventLog, attach_kv_event_log, events_body
from pipeline.replica_state import queued_prefill_tokens
from router.core import Dispatch, Router
from router.policies import POLICIES
from router.replica import READY
from router.request_key import RoutedRequest, routed_request
from router.ttft_predictor import PredictorConfig, TtftPredictor
from scheduler.prefix_cache import extend_block_hashes
from scheduler.scheduler import Scheduler
from stages.messages import GenerateRequest, SampledToken, StepResult
from stages.sampling import SamplingParams
from stages.trace import RequestTrace

# A running request's share of a step in the cost model: batch 1 decodes in 5.69 ms, batch 64 in
# 13.77 ms (bench/sim/cost_model.py), about 0.13 ms a request.
DECODE_S_PER_REQUEST = 0.00013


@dataclass
class SimReplica:
    sched: Scheduler
    events: KvEventLog
    batch: object | None = None


_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def token_text(token_ids: list[int]) -> str:
    """A prompt as the router sees it: text, CHARS_PER_TOKEN (4) characters per token, equal
    prefixes of tokens giving equal prefixes of text."""
    c = _TOKEN_CHARS
    return "".join(c[t & 63] + c[(t >> 6) & 63] + c[(t >> 12) & 63] + c[(t >> 18) & 63] for t in token_ids)


@dataclass
class Record:
    turn: int
    arrival_s: float
    first_token_s: float | None = None
    reply: list[int] = field(default_factory=list)


def prefill_tokens_per_s(cfg: SimConfig, cost: StepCostModel, num_tokens: int = 2048) -> float:
    """What a replica would publish: one lone prompt's tokens over its TTFT."""
    res = simulate([SimRequest("probe", 0.0, list(range(num_tokens)), 1, "short")], cfg, cost)
    return num_tokens / res.records["probe"].first_token_s


class FleetSim:
    def __init__(self, num_replicas: int, policy: str, cfg: SimConfig, cost: StepCostModel, num_requests: int,
                 think_s: float, seed: int, oracle: bool = False, poll_s: float = 0.5) -> None:
        self.cfg, self.cost, self.think_s = cfg, cost, think_s
        self.oracle, self.poll_s = oracle, poll_s
        self.rng = random.Random(seed)
        predictor = TtftPredictor(PredictorConfig(decode_s_per_request=DECODE_S_PER_REQUEST,
                                                  learn_weight=0.0 if oracle else PredictorConfig.learn_weight))
        self.router = Router([f"http://sim-{i}:1" for i in range(num_replicas)], policy, predictor=predictor,
                             clock=lambda: self.now)
        rate = prefill_tokens_per_s(cfg, cost) if oracle else None
        for r in self.router.replicas:
            r.state, r.load.prefill_tokens_per_s = READY, rate
        self.replicas = []
        for _ in range(num_replicas):
            sched = Scheduler(cfg.scheduler_config(num_requests))
            log = attach_kv_event_log(sched.kv.pool, cfg.block_size)
            log.max_publish_s = float("inf")  # simulated time: publishing costs none of it
            self.replicas.append(SimReplica(sched, log))
        self.events: list[tuple[float, int, str, object]] = []
        self.records: dict[str, Record] = {}
        self.dispatches: dict[str, Dispatch] = {}
        self.turns: dict[str, Turn] = {}
        self.conversations: dict[int, object] = {}
        self.now, self._seq = 0.0, 0
        self.pending_text: dict[str, str] = {}  # a request's prompt text, from routing to admission

    def push(self, t: float, kind: str, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, payload))

    def run(self, turns: list[Turn], convs: list | None = None) -> dict[str, Record]:
        for conv in convs or []:
            self.conversations[conv.index] = conv
            self.push(conv.start_s, "arrive", conv.first_turn())
        for turn in turns:
            self.push(turn.arrival_s, "arrive", turn)
        if not self.oracle:
            self.poll()  # the router's first round of checks, before it routes
        while self.events:
            self.now, _, kind, payload = heapq.heappop(self.events)
            if kind == "arrive":
                self.arrive(payload)
            elif kind == "step":
                self.step_end(payload)
            else:
                self.poll()
        return self.records

    def poll(self) -> None:
        """One round of the router's health checks: each replica's state, then its block events."""
        for i, rep in enumerate(self.replicas):
            self.publish(i)
            self.router.events.apply(i, events_body(rep.events, *self.router.events.place(i)))
        if self.events:  # the run is not over: check again
            self.push(self.now + self.poll_s, "poll", None)

    def routed(self, turn: Turn, rid: str) -> RoutedRequest:
        if self.oracle:
            hashes: list[bytes] = []
            extend_block_hashes(hashes, turn.prompt_token_ids, self.cfg.block_size)
            return RoutedRequest(tuple(hashes), len(turn.prompt_token_ids))
        text = token_text(turn.prompt_token_ids)
        request = routed_request(orjson.dumps({"prompt": text, "max_tokens": turn.max_tokens}))
        self.pending_text[rid] = text
        return request

    def arrive(self, turn: Turn) -> None:
        rid = f"c{turn.conversation}-t{turn.turn}"
        d = self.router.dispatch(self.routed(turn, rid))
        self.dispatches[rid], self.turns[rid] = d, turn
        self.records[rid] = Record(turn.turn, self.now)
        rep = self.replicas[d.replica_index]
        err = rep.sched.add_request(GenerateRequest(rid, turn.prompt_token_ids,
                                                    SamplingParams(max_tokens=turn.max_tokens, ignore_eos=True),
                                                    RequestTrace(rid)))
        assert err is None, err
        if self.oracle:
            self.publish(d.replica_index)
        else:
            rep.events.admitted(rid, self.pending_text.pop(rid), turn.prompt_token_ids, None)
        if rep.batch is None:
            self.start_step(d.replica_index)

    def start_step(self, i: int) -> None:
        rep = self.replicas[i]
        rep.sched.reclaim()
        rep.batch = rep.sched.schedule()
        if rep.batch is not None:
            self.push(self.now + self.cost.step_s(rep.batch), "step", i)

    def step_end(self, i: int) -> None:
        rep = self.replicas[i]
        batch, rep.batch = rep.batch, None
        sampled = [SampledToken(c.request_id, 900_000_000 + self.rng.randrange(10**8))
                   for c in batch.chunks if c.sample]
        for ev in rep.sched.update(batch, StepResult(batch.step_id, sampled)):
            rec, d = self.records[ev.request_id], self.dispatches[ev.request_id]
            rec.reply += ev.token_ids
            if ev.token_ids and rec.first_token_s is None:
                rec.first_token_s = self.now
                self.router.first_token(d)
            if ev.finish_reason is not None:
                self.router.finish(d)
                rep.events.finished(ev.request_id)
                self.next_turn(ev.request_id, rec)
        if self.oracle:
            self.publish(i)
        self.start_step(i)

    def next_turn(self, rid: str, rec: Record) -> None:
        turn = self.turns.pop(rid)
        conv = self.conversations.get(turn.conversation)
        if conv is not None:
            nxt = conv.next_turn(turn.turn + 1, rec.reply, self.now + self.rng.expovariate(1 / self.think_s))
            if nxt is not None:
                self.push(nxt.arrival_s, "arrive", nxt)

    def publish(self, i: int) -> None:
        load, sched = self.router.replicas[i].load, self.replicas[i].sched
        load.num_waiting, load.num_running = len(sched.waiting), len(sched.running)
        load.num_queued_prefill_tokens = queued_prefill_tokens(sched.waiting, sched.running)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def summarize(records: dict[str, Record]) -> dict:
    out = {}
    for name, keep in (("first_turn", lambda r: r.turn == 0), ("returning_turn", lambda r: r.turn > 0)):
        ttft = [r.first_token_s - r.arrival_s for r in records.values() if keep(r)]
        if ttft:
            out[name] = {"num": len(ttft), "p50_ms": round(pct(ttft, 0.5) * 1e3, 2),
                         "p95_ms": round(pct(ttft, 0.95) * 1e3, 2), "mean_ms": round(sum(ttft) / len(ttft) * 1e3, 2)}
    return out


def run_one(workload: str, num_replicas: int, policy: str, per_replica_rate: float, num_turns: int,
            think_s: float, conversations_per_replica: int, seed: int, num_system_prompts: int | None = None,
            oracle: bool = False, poll_s: float = 0.5) -> dict:
    cfg, cost = SimConfig(), StepCostModel()
    if workload == "multi-turn":
        num_convs = conversations_per_replica * num_replicas
        convs = conversations(num_convs, per_replica_rate * num_replicas / num_turns, num_turns, seed,
                              num_system_prompts)
        sim = FleetSim(num_replicas, policy, cfg, cost, num_convs * num_turns, think_s, seed, oracle, poll_s)
        return summarize(sim.run([], convs))
    reqs = uniform(conversations_per_replica * num_turns * num_replicas, per_replica_rate * num_replicas, seed)
    sim = FleetSim(num_replicas, policy, cfg, cost, len(reqs), think_s, seed, oracle, poll_s)
    return summarize(sim.run(reqs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.sim.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--replicas", type=int, nargs="+", default=[8, 16, 64])
    p.add_argument("--policies", nargs="+", choices=tuple(POLICIES), default=list(POLICIES))
    p.add_argument("--workloads", nargs="+", choices=("multi-turn", "uniform"), default=["multi-turn", "uniform"])
    p.add_argument("--rate", type=float, default=14.0, help="requests/s per replica (an H200 sustains ~27 "
                                                            "uniform 1,024-token ones)")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--think-s", type=float, default=5.0)
    p.add_argument("--conversations-per-replica", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--system-prompts", type=int, default=None,
                   help="multi-turn: conversations share this many system prompts (default: one each)")
    p.add_argument("--oracle", action="store_true",
                   help="route on what only the simulator knows (token hashes, exact loads and rate)")
    p.add_argument("--poll-s", type=float, default=0.5, help="seconds between the router's reads of each "
                                                             "replica's state and block events")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not a.poll_s > 0:
        p.error(f"--poll-s {a.poll_s}: must be > 0")
    rows = []
    for workload in a.workloads:
        for n in a.replicas:
            for policy in a.policies:
                res = run_one(workload, n, policy, a.rate, a.turns, a.think_s, a.conversations_per_replica, a.seed,
                              a.system_prompts, a.oracle, a.poll_s)
                rows.append({"workload": workload, "replicas": n, "policy": policy, **res})
                if not a.json:
                    print(workload, n, policy, res, flush=True)
    if a.json:
        print(json.dumps({"args": vars(a), "output_tokens": OUTPUT_TOKENS, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
