"""Shared pieces of the reliability tests (disconnects, overload, faults, shutdown, fuzz, soak)."""
from __future__ import annotations

from urllib.parse import urlsplit

from bench.server_probe import Probe
from bench.soak_client import Reply, request

# dummy:tiny with a small KV pool: starts in seconds (the default 1 GiB pool takes much longer).
TINY = ("--model", "dummy:tiny", "--max-model-len", "1024", "--num-kv-blocks", "1024", "--log-level", "warning")


def address(server) -> tuple[str, int]:
    parts = urlsplit(server.base_url)
    return parts.hostname, parts.port


def probe(server) -> Probe:
    return Probe(*address(server), server.uds)


async def post(server, path: str, body: dict | bytes, **kwargs) -> Reply:
    host, port = address(server)
    return await request(host, port, path, body, uds=server.uds, **kwargs)


def finish_reason(reply: Reply) -> str | None:
    """The finish_reason of a reply, streamed or whole."""
    if reply.events:
        reasons = [c["choices"][0]["finish_reason"] for c in reply.json_events() if c.get("choices")]
        reasons = [r for r in reasons if r is not None]
        return reasons[-1] if reasons else None
    return reply.json()["choices"][0]["finish_reason"]


def stream_error(reply: Reply) -> dict | None:
    """The error object of an SSE error event, if the stream carried one."""
    for event in reply.json_events():
        if "error" in event:
            return event["error"]
    return None


def streamed_tokens(reply: Reply) -> tuple[list[str], list[float]]:
    """(token strings, top-2 logprob gap per token) of a completions stream asked with logprobs=2.

    A logprob gap is the logit gap (one normaliser). When the two best tokens share their text
    (two byte tokens that both print U+FFFD) the top dict holds one entry: the gap cannot be read,
    and the tokens cannot be told apart in text either, so it counts as a tie (gap 0).
    """
    tokens: list[str] = []
    gaps: list[float] = []
    for chunk in reply.json_events():
        if not chunk.get("choices"):
            continue
        lp = chunk["choices"][0]["logprobs"]
        if lp is None:
            continue
        tokens.extend(lp["tokens"])
        for top in lp["top_logprobs"]:
            values = sorted(top.values(), reverse=True)
            gaps.append(values[0] - values[1] if len(values) > 1 else 0.0)
    return tokens, gaps
